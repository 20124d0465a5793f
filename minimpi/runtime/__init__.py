"""minimpi.runtime.world."""
