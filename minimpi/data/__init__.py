"""minimpi.data."""
