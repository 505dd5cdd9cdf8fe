"""The agent's side of grantd: `grantd agent`, `grantd grant` and `grantd run` (grantd.agent.cli).

A client of the HTTP interface only: httpx and cryptography, never a server module (tests/unit/test_layers.py).

    cli       the entry: argparse subparsers, errors to stderr (text or --json), exit codes
    commands  one function per command (keygen, login, whoami, logout, grant ..., run)
    state     agent.json / agent.toml under $XDG_CONFIG_HOME/grantd, the Ed25519 key
    api       the IdP with the agent's token: challenge-response sign-in (D5), silent renewal
    wait      waiting for a decision: the event stream, ETag polling, riding out restarts
    run       handing the AuthZ-JWT to `grantd elevate` (a pipe as root, a FIFO through sudo)
    output    what is printed: the server's values escaped (grantd.core.display, D18)
    errors    CliError and the exit codes

What it shares with the console and `grantd login` (problems, SSE, private files) is grantd.client.
"""
