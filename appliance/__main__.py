"""`python -m grantd` is the same program as the `grantd` command."""

import sys

if __name__ == "__main__":
    if getattr(sys, "frozen", False):
        # First, so a frozen program's multiprocessing children start correctly. Only when frozen:
        # it does nothing otherwise, and importing multiprocessing would cost `grantd elevate` ~15 ms.
        import multiprocessing

        multiprocessing.freeze_support()
    from grantd.cli import main

    raise SystemExit(main())
