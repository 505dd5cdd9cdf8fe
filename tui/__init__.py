"""grantd's approver console: a Textual TUI that shows pending grants live and decides them.

`grantd tui` is the entry point (tui/cli.py). The package is split so the pure parts (argv
escaping, SSE parsing, the grant model, the HTTP client) import without Textual.
"""
