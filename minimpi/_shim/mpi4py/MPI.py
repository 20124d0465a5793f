"""mpi4py.MPI shim: this module *is* minimpi.MPI."""
import sys

import minimpi.MPI

sys.modules[__name__] = minimpi.MPI
