"""Entry point of the PyInstaller bundle: the same program as the `grantd` console script."""

import sys

if __name__ == "__main__":
    from grantd.cli import COMMANDS, main

    if sys.argv[1:2] == [] or sys.argv[1] not in COMMANDS:
        # A frozen program is also started as multiprocessing's helper processes (`--multiprocessing-fork`,
        # `-c ...`): freeze_support() runs those and exits, before main() could. Skipped when argv[1]
        # is a grantd command, which no helper's is: `grantd elevate` does not import multiprocessing.
        import multiprocessing

        multiprocessing.freeze_support()
    raise SystemExit(main())
