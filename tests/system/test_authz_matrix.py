"""The authorisation matrix: every route of the app x every kind of caller -> the expected answer.

One table (``TABLE`` in tests/system/authz_table.py) is the rule, the test and the documentation: each cell is checked
against an in-process server, and docs/authorization.md is that table rendered (a test checks the
file matches). After changing the table, regenerate the page with either of

    .venv/bin/python tests/system/test_authz_matrix.py            # writes docs/authorization.md
    GRANTD_WRITE_AUTHZ_DOC=1 .venv/bin/python -m pytest -q tests/system/test_authz_matrix.py

A route the table does not list fails ``test_every_route_is_in_the_table``: new routes cannot skip
the matrix. A new kind of caller (a person, an OAuth client) is one column: an entry in ``CALLERS``
(authz_table.py, with its legend) plus its credential in ``build_world`` (tests/authz_world.py), and one
value per row; each row's representative request is in authz_requests.py.

Cells: an HTTP status, optionally followed by what the body must say:
``200 valid`` / ``200 invalid`` (verify's ``valid``), ``200 consumed`` / ``200 valid`` /
``200 revoked`` (consume's ``status`` or ``error``), ``200 op:ok`` / ``200 op:403`` (the batch
operation's outcome), ``303 login`` (a page sends the caller to /login), ``200 page`` / ``403 page``
/ ``404 page`` (an HTML page, errors too). Every 401 must carry ``WWW-Authenticate: Bearer``; every 4xx is problem+json.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # `python tests/system/test_authz_matrix.py` regenerates the page
    sys.path.insert(0, str(TESTS))

import pytest  # noqa: E402

from authz_world import NO_LIMITS, World, build_world  # noqa: E402
from system.authz_requests import REQUESTS, check, route_keys  # noqa: E402
from system.authz_table import AUTHZ_LEGEND, CALLERS, COLUMNS, DOC, ROWS, render_doc  # noqa: E402

# -- the tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from inproc import InProcessServer

    from dns_server import TxtDnsServer

    with TxtDnsServer({}) as dns:
        sp = f'\n[sp]\nenabled = true\nallow_http_idp = true\nnameservers = ["{dns.address}"]\n'
        srv = InProcessServer(tmp_path_factory.mktemp("authz"), extra=NO_LIMITS + sp)
        federate_to_itself(srv)
        srv.start()
        dns.records["_ddisa.matrix.test"] = [f"v=ddisa1 idp={srv.url}"]
        try:
            yield build_world(srv)
        finally:
            srv.stop()


def federate_to_itself(srv: Any) -> None:
    """A [[federation.providers]] table "self" whose upstream is the server itself (federated sign-in)."""
    (srv.directory / "self-client-secret").write_text("matrix-client-secret\n")
    (srv.directory / "self-client-secret").chmod(0o600)
    with srv.config_path.open("a") as config:
        config.write(
            f'\n[[federation.providers]]\nid = "self"\ntype = "oidc"\nissuer = "{srv.url}"\n'
            'client_id = "matrix"\nclient_secret = "file:self-client-secret"\n'
        )


CELLS = [(route, column) for route in ROWS for column in COLUMNS]


@pytest.mark.parametrize(("route", "column"), CELLS, ids=[f"{r} | {c}" for r, c in CELLS])
def test_cell(world: World, route: str, column: str) -> None:
    check(REQUESTS[route](world, column), ROWS[route][column])


def test_every_route_is_in_the_table(world: World) -> None:
    served = route_keys(world.srv.app)
    assert served - set(ROWS) == set(), "routes missing from the authorisation matrix (add a row to TABLE)"
    assert set(ROWS) - served == set(), "rows for routes the server does not have"
    assert set(REQUESTS) == set(ROWS), "every row needs a representative request in REQUESTS"


def test_every_column_has_a_credential(world: World) -> None:
    assert set(world.bearers) == set(CALLERS), "every column needs a credential in build_world"


def test_every_column_has_a_legend() -> None:
    assert COLUMNS == list(CALLERS) == list(AUTHZ_LEGEND)


def test_docs_match_the_table() -> None:
    expected = render_doc()
    if os.environ.get("GRANTD_WRITE_AUTHZ_DOC"):
        DOC.write_text(expected)
    assert DOC.exists() and DOC.read_text() == expected, (
        "docs/authorization.md is out of date: run `.venv/bin/python tests/system/test_authz_matrix.py`"
    )


if __name__ == "__main__":
    DOC.write_text(render_doc())
    print(f"wrote {DOC}")
