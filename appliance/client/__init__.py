"""What grantd's HTTP clients share: the agent CLI (grantd.agent), the approver console (grantd.tui)
and `grantd login` (grantd.tui.signin).

- ``problems``: the one reader of an error answer (problem+json or an OAuth error), the server's
  words escaped with grantd.core.display before any terminal shows them (D18);
- ``sse``: the one Server-Sent Events decoder (the WHATWG event-stream format, line by line);
- ``files``: the client's private files under ``$XDG_CONFIG_HOME/grantd`` (agent.json, session.json):
  written 0600, atomically, in a directory only its owner may enter or change.

Standard library plus grantd.core.display only (tests/unit/test_layers.py): every client imports it, and
`grantd login` stays light.
"""
