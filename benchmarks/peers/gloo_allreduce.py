"""Peer: torch.distributed all_reduce (SUM, float32) with the gloo backend over TCP loopback.

Runs in its own virtualenv (torch==2.13.0, CPU build), never imports minimpi. Started by
compare.py as ``python gloo_allreduce.py OUT.json TARGET P SIZE...``: it starts P ranks
itself (one process each, one thread each), rendezvous through a TCPStore on 127.0.0.1.
Timing as in benchmarks/collectives.py; rank 0 writes avg/min/max over ranks as JSON.
"""
import json
import os
import socket
import subprocess
import sys
import time


def rank_main(out, target, sizes, rank, world, port):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    results = {}
    for size in sizes:
        t_ = torch.ones(max(1, size // 4), dtype=torch.float32)
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(t_)
        warm = [time.perf_counter() - t]
        dist.broadcast_object_list(warm, src=0)
        iters = int(min(2000, max(2, target / max(warm[0], 1e-7))))
        if warm[0] < 1e-3:
            for _ in range(min(iters, 20)):
                dist.all_reduce(t_)
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t_)
        mine = (time.perf_counter() - t) / iters
        times = [None] * world
        dist.all_gather_object(times, mine)
        if rank == 0:
            results[str(size)] = {"avg": sum(times) / len(times), "min": min(times),
                                  "max": max(times), "iters": iters, "bytes": t_.numel() * 4}
    if rank == 0:
        results["library"] = f"torch {torch.__version__} gloo"
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def main():
    out, target, world = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    sizes = [int(s) for s in sys.argv[4:]]
    if os.environ.get("GLOO_BENCH_RANK") is not None:
        rank_main(out, target, sizes, int(os.environ["GLOO_BENCH_RANK"]), world,
                  int(os.environ["GLOO_BENCH_PORT"]))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_BENCH_PORT=str(port), OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, __file__] + sys.argv[1:],
                              env=dict(env, GLOO_BENCH_RANK=str(r))) for r in range(world)]
    codes = [p.wait() for p in procs]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
