"""The collective calls of the communicators: the calls of one collective per module.

``<collective>_calls.py`` holds the MPI calls of one collective on an intracommunicator
(``allreduce_calls.py``: ``Allreduce``, ``Iallreduce``, ``allreduce``), ``inter_calls.py``
every collective call of an intercommunicator and ``neighbor_calls.py`` the neighbourhood
calls of topologies; the persistent ``*_init`` calls (``comm/persistent_coll.py``) keep
what ``prepare_<collective>`` made of their arguments. Each parses a collective's
arguments (buffer specs, ``IN_PLACE``, counts, root, op), then runs the algorithm the communicator's plan chooses - from the
collective's module in :mod:`minimpi.coll` (``coll/allreduce.py``), of the communicator's
kind - through :func:`~minimpi.comm.collectives.common.execute`, the one path every form
takes. Its public functions are the methods of the communicator classes
(``Allreduce = allreduce_calls.Allreduce``); the dependency points one way: this layer
imports the algorithms, never the reverse.
"""
