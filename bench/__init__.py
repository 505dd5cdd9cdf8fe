"""Load generator for a real grantd server (issue 3, "Benchmark"). Run `python bench/run.py --help`."""
