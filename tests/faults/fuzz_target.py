"""The job the fuzz tests attack: ranks that publish where they listen, wait, then work.

    fuzz_target.py OUTDIR MODE ROUNDS

Every rank writes OUTDIR/addr.<rank> (its data-plane "host:port" and pid), waits for the
file OUTDIR/go (the test creates it once its attack is done), then runs ROUNDS checked
collectives and point-to-point exchanges, opening its connections only now (the test sets
MINIMPI_CONNECT_ALL_MAX=0) so that they must succeed in spite of the attack. Each rank
prints ``ok <rank> <peak RSS in KiB> <open fds>`` at the end.

MODE insider: rank 1 also attacks the coordinator with the job's own secret (what a peer
that got hold of it, or captured traffic, could send) before the work starts: a replayed
register from a new connection, bad MACs, unknown kinds and ranks, an oversize message, a
flood; it prints ``replay-answer <kind>`` for what the coordinator answered the replay.
"""
import os
import sys
import time

import numpy as np

from minimpi import MPI
from minimpi.runtime import world

outdir, mode, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
transport = world.world_state().engine.transport
host, port = transport._listener.sock.getsockname()[:2]
with open(os.path.join(outdir, f"addr.{rank}.tmp"), "w") as f:
    f.write(f"{host}:{port} {os.getpid()}")
os.rename(os.path.join(outdir, f"addr.{rank}.tmp"), os.path.join(outdir, f"addr.{rank}"))


def insider_attack() -> None:
    import msgpack
    import zmq

    from minimpi.runtime.bootstrap import MAX_MESSAGE, curve_server_keys, seal
    client = world.world_state().info.coordinator
    secret = world.world_state().info.secret
    ctx = zmq.Context()

    def dealer():
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.curve_serverkey = curve_server_keys(secret)[0]
        s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
        s.connect(os.environ["MINIMPI_COORD"])
        return s

    # a register exactly as rank 1 sent it on its own connection, sent again from another
    captured = seal(secret, {"r": rank, "t": "register", "c": client._challenge,
                             "addr": "6.6.6.6:666", "pid": 1, "host": "evil"})
    thief = dealer()
    thief.send_multipart(captured)
    answer = thief.recv_multipart() if thief.poll(3000) else None
    kind = msgpack.unpackb(answer[1]).get("t") if answer else None
    print(f"replay-answer {kind}", flush=True)
    junk = dealer()
    for i in range(2000):
        choice = i % 5
        if choice == 0:
            junk.send_multipart([b"\0" * 32, b"x" * (i % 300)])
        elif choice == 1:
            junk.send_multipart(seal(secret, {"r": 99, "t": "abort", "c": "x"}))
        elif choice == 2:
            junk.send_multipart(seal(secret, [1, 2, 3]))
        elif choice == 3:
            junk.send_multipart([b"a", b"b", b"c", b"d"])
        else:
            junk.send_multipart(seal(secret, {"r": 0, "t": "abort", "code": 9, "c": "stale"}))
    big = dealer()
    big.send_multipart([b"\0" * 32, b"x" * (MAX_MESSAGE * 4)])
    time.sleep(0.5)
    for s in (thief, junk, big):
        s.close(0)
    ctx.term()


if mode == "insider" and rank == 1:
    insider_attack()
# Wait for the test's "go" inside minimpi, so that the attack meets ranks that make
# progress (accept and refuse connections) the way a real job does between its calls.
go = os.path.join(outdir, "go")
deadline = time.monotonic() + 60
if rank == 0:
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("the test never said go")
        comm.Iprobe()
        time.sleep(0.02)
    for r in range(1, size):
        comm.send("go", dest=r, tag=999)   # the first connections open only now
else:
    req = comm.irecv(source=0, tag=999)
    while not req.Test():
        if time.monotonic() > deadline:
            sys.exit("rank 0 never said go")
        time.sleep(0.02)

rng = np.random.default_rng(7)
for i in range(rounds):
    n = int(rng.integers(0, 50_000))
    x = np.arange(n, dtype=np.float64) + rank
    y = np.empty_like(x)
    comm.Allreduce(x, y)
    assert np.array_equal(y, np.arange(n) * size + size * (size - 1) / 2), f"round {i}"
    got = comm.sendrecv({"from": rank, "i": i}, dest=(rank + 1) % size,
                        source=(rank - 1) % size)
    assert got == {"from": (rank - 1) % size, "i": i}, got
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
print(f"ok {rank} {peak} {len(os.listdir('/proc/self/fd'))}", flush=True)
