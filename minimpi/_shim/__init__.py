"""Holds the ``mpi4py`` forwarding package; this directory goes on the ranks' PYTHONPATH."""
