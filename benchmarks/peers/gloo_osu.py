"""Peer: the tests of benchmarks/osu_mpi4py.py with torch.distributed and gloo (TCP loopback).

    python gloo_osu.py -n 4 --test allreduce:8,1048576 --test bcast:8 --out r.json

Runs in the torch virtualenv (torch==2.13.0, CPU build; see setup.sh) and never imports
minimpi. It starts its ``-n`` ranks itself (one process each, one thread each), which meet
through a TCPStore on 127.0.0.1. Same command line, timing and JSON as osu_mpi4py.py (whose
argument parsing, warm-up and result file it reuses); the calls are:

* latency: ``dist.send``/``dist.recv`` of uint8 tensors, ping-pong between ranks 0 and 1;
* bandwidth: a window of ``dist.isend`` / ``dist.irecv``, ``wait`` on all, then a 4-byte ack;
* obj_latency: ``send_object_list``/``recv_object_list`` of a ``bytes`` object;
* allreduce (SUM, float32), bcast (``broadcast``), allgather (``all_gather_single``, or
  ``all_gather_into_tensor`` in a torch that lacks it),
  alltoall (``all_to_all_single``), uint8 elsewhere, each followed by ``dist.barrier()``;
* obj_allreduce: torch.distributed has no reduction of Python objects, so none is measured.
"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import osu_mpi4py as osu  # noqa: E402  (benchmarks/osu_mpi4py.py: only its helpers)


def rank_main(args, rank, world, port):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    res = osu.Results(args.out, f"torch {torch.__version__} gloo", world) if rank == 0 else None

    def bcast(value):
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sized(loop, one_call):
        one_call()
        warm = osu.warm_up(one_call, args.target, bcast)
        iters = osu.iterations(warm, args.target, args.max_iters)
        return [loop(iters) for _ in range(args.reps)], iters

    def p2p(test, size):
        window = osu.window_for(size) if test == "bandwidth" else None
        a = torch.ones(max(1, size), dtype=torch.uint8)
        b = torch.zeros(max(1, size), dtype=torch.uint8)
        ack = torch.zeros(4, dtype=torch.uint8)
        obj = bytes(size)

        def once():
            if test == "latency":
                if rank == 0:
                    dist.send(a, 1)
                    dist.recv(b, 1)
                elif rank == 1:
                    dist.recv(b, 0)
                    dist.send(a, 0)
            elif test == "obj_latency":
                box = [obj]
                if rank == 0:
                    dist.send_object_list(box, dst=1)
                    dist.recv_object_list(box, src=1)
                elif rank == 1:
                    dist.recv_object_list(box, src=0)
                    dist.send_object_list(box, dst=0)
            elif rank == 0:
                for req in [dist.isend(a, 1) for _ in range(window)]:
                    req.wait()
                dist.recv(ack, 1)
            elif rank == 1:
                for req in [dist.irecv(b, 0) for _ in range(window)]:
                    req.wait()
                dist.send(ack, 0)

        def loop(iters):
            dist.barrier()
            t = time.perf_counter()
            for _ in range(iters):
                once()
            elapsed = time.perf_counter() - t
            return size * window * iters / elapsed if window else elapsed / iters / 2

        samples, iters = sized(loop, once)
        if rank == 0:
            res.add(test, size, samples, iters, window=window)

    def make_call(test, size):
        block = max(1, size // world)
        if test == "allreduce":
            t = torch.ones(max(1, size // 4), dtype=torch.float32)
            return lambda: dist.all_reduce(t)
        if test == "bcast":
            t = torch.ones(max(1, size), dtype=torch.uint8)
            return lambda: dist.broadcast(t, src=0)
        if test == "allgather":
            send = torch.ones(block, dtype=torch.uint8)
            recv = torch.empty(block * world, dtype=torch.uint8)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return lambda: gather(recv, send)
        if test == "alltoall":
            send = torch.ones(block * world, dtype=torch.uint8)
            recv = torch.empty(block * world, dtype=torch.uint8)
            return lambda: dist.all_to_all_single(recv, send)
        return None

    def collective(test, size):
        call = make_call(test, size)
        if call is None:
            if rank == 0:
                res.error(test, size, "not available in torch.distributed")
            return

        def loop(iters):
            dist.barrier()
            total = 0.0
            for _ in range(iters):
                t = time.perf_counter()
                call()
                total += time.perf_counter() - t
                dist.barrier()
            return total / iters

        def once():
            call()
            dist.barrier()

        per_rank, iters = sized(loop, once)
        gathered = [None] * world
        dist.all_gather_object(gathered, per_rank)
        if rank == 0:
            reps = range(len(per_rank))
            res.add(test, size, [sum(r[i] for r in gathered) / world for i in reps], iters,
                    slowest=[max(r[i] for r in gathered) for i in reps])

    for test, sizes in args.tests:
        for size in sizes:
            if test in osu.P2P_TESTS and world < 2:
                continue
            try:
                (p2p if test in osu.P2P_TESTS else collective)(test, size)
            except Exception as e:  # noqa: BLE001
                if rank == 0:
                    res.error(test, size, f"{type(e).__name__}: {e}")
                raise
    dist.barrier()
    if rank == 0 and args.out is None:
        print(json.dumps(res.data))
    dist.destroy_process_group()


def main():
    argv = sys.argv[1:]
    world = 2
    if "-n" in argv:
        i = argv.index("-n")
        world = int(argv[i + 1])
        del argv[i:i + 2]
    args = osu.parse_args(argv)
    if os.environ.get("GLOO_OSU_RANK") is not None:
        rank_main(args, int(os.environ["GLOO_OSU_RANK"]), world, int(os.environ["GLOO_OSU_PORT"]))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_OSU_PORT=str(port), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "-n", str(world)] + argv,
                              env=dict(env, GLOO_OSU_RANK=str(r))) for r in range(world)]
    codes = [proc.wait() for proc in procs]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
