"""`python -m grantd` is the same program as the `grantd` command."""

import multiprocessing

if __name__ == "__main__":
    multiprocessing.freeze_support()  # first, so a frozen bundle's worker processes start correctly
    from grantd.cli import main

    raise SystemExit(main())
