"""minimpi.comm.communicator."""
