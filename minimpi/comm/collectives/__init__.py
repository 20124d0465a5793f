"""The collective calls of the communicators: one module per collective.

Each module parses a collective's arguments (buffer specs, ``IN_PLACE``, counts, root, op),
then runs the algorithm the communicator's plan chooses from :mod:`minimpi.coll` through
:func:`~minimpi.comm.collectives.common.execute`. Its public functions are the methods of
``Intracomm`` (``Allreduce = allreduce.Allreduce``); the dependency points one way: this
layer imports the algorithms, never the reverse.
"""
