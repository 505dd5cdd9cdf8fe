"""The test suite's port picker (tests/support/ports.py) never hands out a port a browser refuses."""

from __future__ import annotations

import itertools

from support import ports


def test_a_browser_unsafe_port_is_never_handed_out(monkeypatch) -> None:
    """A port Chromium refuses (net::ERR_UNSAFE_PORT) broke two browser tests in CI when it came up."""
    monkeypatch.setattr(ports, "_candidates", itertools.cycle([10080, 10081]))
    monkeypatch.setattr(ports, "_handed_out", set())
    assert ports.free_port() == 10081
    assert 10080 in ports.BROWSER_UNSAFE
