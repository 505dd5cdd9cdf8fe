"""The console's screens: the main grant list and the small modal forms."""
