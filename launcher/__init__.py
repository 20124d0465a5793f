"""minimpi's launcher (installed as ``minimpi.launcher``).

* ``cli``         the ``minimpi`` command and its subcommand registry
* ``run``         ``minimpi run``: options -> a JobSpec
* ``job``         one local job: spawn, event loop, failure policy, exit code
* ``processes``   starting/stopping rank processes (process groups, PDEATHSIG)
* ``output``      forwarding rank output with ``[rank] `` prefixes
* ``coordinator`` the control plane (pyzmq ROUTER, HMAC-authenticated msgpack)
* ``hosts``       host lists, hostfiles, Slurm node lists, placement
* ``multihost``   a job whose ranks run through agents (other hosts, Slurm nodes)
* ``agent``       the per-host agent (``python -m minimpi.launcher.agent``)
* ``spawners``    how an agent is started on a host: directly, ssh, srun
* ``rendezvous``  the coordinator rank 0 hosts when no launcher started the job
* ``embed``       ``minimpi.launch``: a job started from inside a program
* ``keygen``      ``minimpi keygen``: the per-user key file of launcher-less jobs
* ``clean``       ``minimpi clean``: what jobs killed outright left (segments, directories)
* ``dashboard``   ``minimpi run --dashboard``: a live page of the job; ``minimpi view TRACE``
* ``tracing``     ``minimpi run --trace FILE`` / ``--stats``: the launcher's half
"""
