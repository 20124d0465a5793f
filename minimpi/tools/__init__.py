"""minimpi.tools."""
