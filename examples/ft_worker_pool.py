"""A worker pool that survives a worker's death (fault tolerance, ULFM).

Rank 0 is the manager: it hands out tasks (the sum of i*i over a range of i) one at a time
and collects the results with wildcard receives; ranks 1.. are workers. Run it as

    minimpi run -n 4 --fault-tolerant examples/ft_worker_pool.py --kill-worker 2

and worker 2 dies (``os._exit``) in the middle of its first task (every worker is handed
one at the start; a later one is not certain: the others may finish every task first).
Without
``--fault-tolerant`` the launcher would end the whole job, naming rank 2; with it, the job
goes on:

* the manager's next wildcard ``recv`` raises ``MPI.ERR_PROC_FAILED_PENDING``: some member
  of the communicator failed, and until the program acknowledges that, a wildcard receive
  cannot know whether the message it waits for would have come from the dead rank;
* the manager asks who failed (``Get_failed``), acknowledges it (``Ack_failed``), puts the
  dead worker's task back in the queue and carries on with the living workers;
* at the end every survivor calls ``Shrink``: a new communicator without the dead rank, on
  which the collectives work again (the manager broadcasts the answer and every survivor
  checks it against a serial computation).

Without ``--kill-worker`` nobody dies and the program is a plain manager/worker pool.
"""
import os
import sys

from mpi4py import MPI

TASKS = 40
CHUNK = 2_000
WORK, STOP = 1, 2            # tags: manager -> worker
RESULT = 3                   # tag: worker -> manager

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
kill = int(sys.argv[sys.argv.index("--kill-worker") + 1]) if "--kill-worker" in sys.argv else None
if size < 2:
    sys.exit("run this with at least 2 ranks (one manager, workers)")


def task_value(task: int) -> int:
    return sum(i * i for i in range(task * CHUNK, (task + 1) * CHUNK))


def send_or_lose(obj, worker: int, tag: int) -> bool:
    """Send to a worker; False if it has failed (the wildcard receive will say so)."""
    try:
        comm.send(obj, dest=worker, tag=tag)
        return True
    except MPI.Exception as exc:
        if exc.Get_error_class() != MPI.ERR_PROC_FAILED:
            raise
        return False


def manager() -> int:
    todo = list(range(TASKS))
    busy = {}                     # worker rank -> the task it is working on
    dead = set()
    total, done = 0, 0

    def give(worker: int) -> None:
        task = todo.pop()
        if send_or_lose(task, worker, WORK):
            busy[worker] = task
        else:
            todo.append(task)

    for worker in range(1, size):             # one task per worker to start
        if todo:
            give(worker)
    while done < TASKS:
        status = MPI.Status()
        try:
            value = comm.recv(source=MPI.ANY_SOURCE, tag=RESULT, status=status)
        except MPI.Exception as exc:
            if exc.Get_error_class() not in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING):
                raise
            failed = comm.Get_failed()
            ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())),
                                              comm.Get_group())
            comm.Ack_failed()
            for worker in set(ranks) - dead:
                dead.add(worker)
                if worker in busy:        # its task was lost with it: hand it out again
                    todo.append(busy.pop(worker))
                print(f"manager: worker {worker} failed; {len(todo)} task(s) waiting, "
                      f"{size - 1 - len(dead)} worker(s) left", flush=True)
            if len(dead) == size - 1:
                sys.exit("manager: every worker failed")
            for worker in range(1, size):  # idle living workers get the requeued tasks
                if worker not in dead and worker not in busy and todo:
                    give(worker)
            continue
        worker = status.Get_source()
        del busy[worker]
        total += value
        done += 1
        if todo:
            give(worker)
    for worker in range(1, size):
        if worker not in dead:
            send_or_lose(None, worker, STOP)
    return total


def worker() -> int:
    tasks = 0
    status = MPI.Status()
    while True:
        task = comm.recv(source=0, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == STOP:
            return tasks
        if rank == kill and tasks == 0:
            os._exit(1)                  # dies in the middle of its first task
        comm.send(task_value(task), dest=0, tag=RESULT)
        tasks += 1


mine = manager() if rank == 0 else worker()
alive = comm.Shrink()                    # everyone still here, ranks renumbered
answer = alive.bcast(mine if rank == 0 else None, root=0)
tasks_done = alive.reduce(0 if rank == 0 else mine, op=MPI.SUM, root=0)
serial = sum(i * i for i in range(TASKS * CHUNK))
assert answer == serial, f"rank {rank}: {answer} differs from serial {serial}"
if rank == 0:
    print(f"manager: {TASKS} tasks done by {alive.Get_size() - 1} surviving worker(s) "
          f"({tasks_done} of the results came from them); sum = {answer}, as computed "
          f"serially", flush=True)
