"""The console's widgets, one per file."""
