"""Lab 7: master/worker task farm with ANY_SOURCE, ANY_TAG and Status."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
WORK, DIE = 1, 2
TASKS = list(range(1, 25))

if rank == 0:
    status = MPI.Status()
    results = {}
    pending = list(TASKS)
    active = 0
    for w in range(1, size):              # seed every worker
        if pending:
            comm.send(pending.pop(0), dest=w, tag=WORK)
            active += 1
        else:
            comm.send(None, dest=w, tag=DIE)
    while active:
        task, value = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
        worker = status.Get_source()
        assert status.Get_tag() == worker and status.source == worker
        assert status.Get_count() > 0          # the pickled size
        results[task] = (value, worker)
        if pending:
            comm.send(pending.pop(0), dest=worker, tag=WORK)
        else:
            comm.send(None, dest=worker, tag=DIE)
            active -= 1
    assert sorted(results) == TASKS
    assert all(v == t * t for t, (v, _) in results.items())
    workers = {w for _, w in results.values()}
    print(f"master: {len(results)} tasks done by {len(workers)} workers")
    print("master_worker: OK")
else:
    status = MPI.Status()
    while True:
        task = comm.recv(source=0, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == DIE:
            break
        comm.send((task, task * task), dest=0, tag=rank)
