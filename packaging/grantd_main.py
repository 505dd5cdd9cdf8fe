"""Entry point of the PyInstaller bundle: the same program as the `grantd` console script."""

import multiprocessing

if __name__ == "__main__":
    multiprocessing.freeze_support()  # first: a frozen program must never run main() in a helper process
    from grantd.cli import main

    raise SystemExit(main())
