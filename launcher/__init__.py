"""minimpi's launcher (installed as ``minimpi.launcher``).

* ``cli``         the ``minimpi`` command and its subcommand registry
* ``run``         ``minimpi run``: options -> a JobSpec
* ``job``         one local job: spawn, event loop, failure policy, exit code
* ``spawn``       starting/stopping rank processes (process groups, PDEATHSIG)
* ``output``      forwarding rank output with ``[rank] `` prefixes
* ``coordinator`` the control plane (pyzmq ROUTER, HMAC-authenticated msgpack)
"""
