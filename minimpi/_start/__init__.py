"""The start script of a rank whose program's directory holds another ``minimpi``
(see :mod:`minimpi._start.minimpi_rank`), and the fork server's template
(:mod:`minimpi._start.forkserver`).

The environment variables they share with the launcher are named here (this package imports
nothing, so that ``launcher/`` may name them without importing the start script).
"""

#: set by a start script that replaced its interpreter: the interpreter options it gave the
#: new one (JSON); the new process takes it out of its environment at once
ENV_STARTED = "MINIMPI_START_APPLIED"
#: the interpreter options the job's template starts with (JSON; launcher/run.py sets it)
ENV_TEMPLATE_FLAGS = "MINIMPI_PYTHON_FLAGS"
#: ``minimpi run --verbose``: the fork server's template says how the ranks start
ENV_VERBOSE = "MINIMPI_VERBOSE"
#: the index of a rank's program in an MPMD job, or of its command in Spawn_multiple
#: (``MPI.APPNUM``; minimpi.comm.communicator reads it)
ENV_APPNUM = "MINIMPI_APPNUM"
