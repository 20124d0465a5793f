"""python -m mpi4py shim."""
import sys

from minimpi.rc import main

sys.exit(main())
