"""grantd: identity provider and human-in-the-loop grant service for AI agents."""

__version__ = "0.1.0"

import sys

# httpx imports its own command-line client (click, rich, pygments: 9 MiB in every process, a sixth
# of a server process) whenever those happen to be installed, as they are here for Textual and
# sqlite-utils. grantd never runs httpx's command line; a None entry makes that one import fail,
# which httpx expects (its `main` then only says the CLI is not installed). Issue 14,
# docs/performance.md.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable", by design
