"""The parts of grantd depend on each other one way only, and the `grantd` command imports lazily.

Every module under appliance/, plugins/ and tui/ is parsed with `ast` (nothing is imported) into
a graph of its grantd imports, at module level and inside functions; imports under
``if TYPE_CHECKING:`` are left out (they never run). Then:

- no cycle among module-level imports (a cycle makes the import order decide what works);
- each client part (CLIENT_PARTS) reaches, through every import it can make at run time, only
  itself and the grantd modules it is allowed: every other grantd module is a server module by
  definition, so a new server package (services/, web/, core/, store/, ...) is covered without
  touching this file. To let a client part use a module, add it to that part's ``may_import``
  (and keep the module light: it runs in that part's process too);
- nor does it import the server's third-party packages.

Inside the server the layers go one way (docs/architecture.md, "Layers"): each module belongs to
exactly one layer of SERVER_LAYERS and imports, at module level or inside a function, only its own
layer and the ones below (web -> plugins -> sp -> oauth -> services -> platform -> store -> core);
and no cycle at all, counting in-function imports (a cycle hidden in a function is still a cycle).

And at run time: `grantd --help` imports no subcommand module; `grantd elevate` (root) loads only
its own modules, pluggy and the standard library; the dispatcher's one-line helps are the modules'.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

import pytest

from grantd.cli import COMMANDS

from conftest import ROOT

# The folders and their import names (pyproject.toml's package-dir).
FOLDERS = {"appliance": "grantd", "plugins": "grantd.plugins", "tui": "grantd.tui"}

# Third-party packages only the server needs; no client part imports them.
SERVER_THIRD_PARTY = ("sanic", "sanic_routing", "sqlite_utils", "webauthn", "tracerite", "html5tagger")


@dataclass(frozen=True)
class Part:
    """Modules (fnmatch patterns over import names) that run without the server."""

    name: str
    modules: tuple[str, ...]
    may_import: tuple[str, ...]  # grantd modules beyond the part itself (patterns)
    forbidden_third_party: tuple[str, ...] = SERVER_THIRD_PARTY


CLIENT_PARTS = (
    # The dispatcher itself: it names its subcommands' modules as strings, imports only the one it runs.
    Part(
        "the grantd dispatcher",
        ("grantd.cli",),
        ("grantd",),
        (*SERVER_THIRD_PARTY, "textual", "httpx", "pluggy", "jwt", "cryptography"),
    ),
    # The agent CLI: a client of the HTTP interface (httpx, cryptography for its key); it shows what the
    # server sends with the one escaping rule (grantd.core.display, pure standard library; D18).
    Part(
        "the agent CLI",
        ("grantd.agent", "grantd.agent.*"),
        (
            "grantd",
            "grantd.core",
            "grantd.core.display",
            "grantd.client",
            "grantd.client.*",
            "grantd.dpop",  # DPoP proofs with the agent's key (D16): the standard library and cryptography
            "grantd.sshkeys",  # (reached by grantd.dpop's thumbprint of a key line; pure, cryptography)
        ),
        (*SERVER_THIRD_PARTY, "textual"),
    ),
    # The client library the agent CLI, the console and `grantd login` share (problems, SSE, private
    # files): the standard library and the escaping rule only, so each client stays as light as it was.
    Part(
        "the client library",
        ("grantd.client", "grantd.client.*"),
        ("grantd", "grantd.core", "grantd.core.display"),
        (*SERVER_THIRD_PARTY, "textual", "httpx", "pluggy", "jwt", "cryptography"),
    ),
    # The elevation tool runs as root: itself, its hook spec, the digest and its built-in check plugin;
    # the receipt format (grantd.receipts, with grantd.sshkeys) when it signs a receipt (D14 "Hosts");
    # the DPoP verifier (grantd.dpop) when a bound AuthZ-JWT comes with a proof (D16).
    Part(
        "the elevation tool",
        ("grantd.elevate", "grantd.elevate.*", "grantd.plugins.elevate_default"),
        ("grantd", "grantd.commands", "grantd.plugins", "grantd.receipts", "grantd.sshkeys", "grantd.dpop"),
        (*SERVER_THIRD_PARTY, "textual"),
    ),
    # The resource-server helper runs inside an MCP server (D17): a client of grantd's HTTP
    # interface (httpx, PyJWT; the DPoP verifier for bound tokens; the MCP SDK when it is used).
    Part(
        "the resource-server helper",
        ("grantd.resource_server",),
        ("grantd", "grantd.dpop", "grantd.sshkeys"),
        (*SERVER_THIRD_PARTY, "textual"),
    ),
    # The approver console reads the URL and token from the server's config file (grantd.config,
    # which checks the whole file: its key checks, the approval-policy parser and the notification
    # routes' parser, grantd.core.notify_routes, are pure core code).
    # It shows agents' text with the one escaping rule the pages use (grantd.core.display).
    Part(
        "the approver console",
        ("grantd.tui", "grantd.tui.*"),
        (
            "grantd",
            "grantd.config",
            "grantd.config.*",
            "grantd.client_address",
            "grantd.core",
            "grantd.core.display",
            "grantd.core.config_keys",
            "grantd.core.notify_routes",
            "grantd.core.review",
            "grantd.core.review.*",
            "grantd.core.lifecycle",
            "grantd.client",
            "grantd.client.*",
        ),
    ),
)


# The server's layers, top to bottom (fnmatch patterns over import names). A module imports only
# modules of its own layer and of the layers below it. The client parts (CLIENT_PARTS) sit on top:
# nothing in the server imports them; what they may import is checked above, part by part.
@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]


SERVER_LAYERS = (
    Layer(
        "entry points and clients",
        (
            "grantd.__main__",
            "grantd.cli",
            "grantd.cli.*",
            "grantd.agent",
            "grantd.agent.*",
            "grantd.tui",
            "grantd.tui.*",
            "grantd.elevate",
            "grantd.elevate.*",
            "grantd.testing",
            "grantd.testing.*",
            "grantd.client",
            "grantd.client.*",
            "grantd.resource_server",
        ),
    ),
    Layer("web", ("grantd.web", "grantd.web.*")),
    Layer("plugins", ("grantd.plugins", "grantd.plugins.*")),
    Layer("sp", ("grantd.sp", "grantd.sp.*")),
    Layer("oauth", ("grantd.oauth", "grantd.oauth.*")),
    Layer("services", ("grantd.services", "grantd.services.*", "grantd.notify", "grantd.notify.*")),
    # What every server part stands on: config, plugin loading and hook specs (the elevation tool's
    # hook spec and what a token's approvals mean, grantd.elevate.approvals, are shared with its
    # built-in plugin), logging, small pure helpers.
    Layer(
        "platform",
        (
            "grantd.plugin_manager",
            "grantd.hookspecs",
            "grantd.elevate.hookspecs",
            "grantd.elevate.approvals",
            "grantd.config",
            "grantd.config.*",
            "grantd.logs",
            "grantd.client_address",
            "grantd.commands",
        ),
    ),
    Layer("store", ("grantd.store", "grantd.store.*")),
    # grantd.sshkeys: parsing an OpenSSH public key line, pure (the log's receipts name hosts by one)
    # grantd.receipts: the execution receipts' format (the log checks them, elevate builds them)
    # grantd.dpop: DPoP proofs (RFC 9449; the server and elevate share the one verifier, D16)
    Layer(
        "core", ("grantd.core", "grantd.core.*", "grantd", "grantd.sshkeys", "grantd.receipts", "grantd.dpop")
    ),
)


def layer_of(module: str) -> int | None:
    """The index of the module's layer (the most specific pattern wins: grantd.elevate.hookspecs is
    platform although grantd.elevate.* is a client), or None."""
    best: tuple[int, int] | None = None
    for index, layer in enumerate(SERVER_LAYERS):
        for pattern in layer.modules:
            if fnmatchcase(module, pattern):
                specificity = len(pattern.replace("*", ""))
                if best is None or specificity > best[0]:
                    best = (specificity, index)
    return None if best is None else best[1]


def upward_imports(graph: tuple[Import, ...]) -> list[str]:
    """Imports (module level or in a function) of a module in a higher layer."""
    found = []
    for imp in graph:
        if not _grantd(imp.target) or imp.target == imp.source:
            continue
        source, target = layer_of(imp.source), layer_of(imp.target)
        if source is not None and target is not None and target < source:
            found.append(
                f"{imp.source} ({SERVER_LAYERS[source].name}) imports {imp.target} "
                f"({SERVER_LAYERS[target].name}) at line {imp.line}"
            )
    return sorted(found)


def import_cycles(graph: tuple[Import, ...], *, module_level_only: bool) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module, Tarjan)."""
    edges: dict[str, set[str]] = {}
    for imp in graph:
        if (imp.module_level or not module_level_only) and _grantd(imp.target) and imp.target != imp.source:
            edges.setdefault(imp.source, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return cycles


@dataclass(frozen=True)
class Import:
    source: str
    target: str  # a grantd module, or a third-party/stdlib top-level name
    line: int
    module_level: bool


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    if rest[-1] == "__init__":
        rest = rest[:-1]
    return ".".join([FOLDERS[folder], *rest])


@cache
def sources() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, source: str, is_package: bool) -> list[str]:
    known = sources()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: resolved against the importing module's package
        package = source if is_package else source.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    # `from package import submodule` imports the submodule; `from module import name` the module.
    targets = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return targets if len(targets) == len(node.names) else [base, *targets]


@cache
def imports() -> tuple[Import, ...]:
    """Every import statement of our modules that can run (module level, functions, classes)."""
    found: list[Import] = []
    for source, path in sources().items():
        is_package = path.name == "__init__.py"

        def visit(
            node: ast.AST, module_level: bool, source: str = source, is_package: bool = is_package
        ) -> None:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.orelse:
                    visit(child, module_level)
                return
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, source, is_package):
                    found.append(Import(source, target, node.lineno, module_level))
                return
            inside = module_level and not isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            for child in ast.iter_child_nodes(node):
                visit(child, inside)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), True)
    return tuple(found)


def _grantd(name: str) -> bool:
    return name == "grantd" or name.startswith("grantd.")


def _with_parents(module: str) -> list[str]:
    """Importing a.b.c runs a/__init__, a.b/__init__ and a.b.c."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _matches(module: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(module, pattern) for pattern in patterns)


def _reach(start: str, graph: tuple[Import, ...]) -> dict[str, list[str]]:
    """Every module importing `start` can load, with one chain of imports that leads there."""
    by_source: dict[str, list[Import]] = {}
    for imp in graph:
        by_source.setdefault(imp.source, []).append(imp)
    chains = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        following = [
            t
            for imp in by_source.get(current, [])
            for t in (_with_parents(imp.target) if _grantd(imp.target) else [imp.target.split(".")[0]])
        ]
        for target in following:
            if target not in chains:
                chains[target] = [*chains[current], target]
                if _grantd(target):
                    todo.append(target)
    return chains


def violations(part: Part, modules: list[str], graph: tuple[Import, ...]) -> list[str]:
    """The import chains by which the part's modules reach what they must not."""
    problems = []
    for module in modules:
        if not _matches(module, part.modules):
            continue
        for reached, chain in _reach(module, graph).items():
            if _grantd(reached):
                allowed = _matches(reached, part.modules) or _matches(reached, part.may_import)
            else:
                allowed = reached not in part.forbidden_third_party
            if not allowed:
                problems.append(" -> ".join(chain))
    return sorted(problems)


# -- the tests ------------------------------------------------------------------------------------


def test_the_scan_sees_every_part():
    names = set(sources())
    assert {
        "grantd",
        "grantd.cli",
        "grantd.cli.server",
        "grantd.agent.cli",
        "grantd.client.problems",
        "grantd.elevate.cli",
        "grantd.elevate.hookspecs",
        "grantd.plugins.elevate_default",
        "grantd.tui.cli",
        "grantd.hookspecs",
    } <= names
    unresolved = {imp.target for imp in imports() if _grantd(imp.target) and imp.target not in names}
    assert not unresolved, f"imports of grantd modules that do not exist: {sorted(unresolved)}"
    for part in CLIENT_PARTS:
        assert any(_matches(name, part.modules) for name in names), part.name


def test_no_import_cycle_among_module_level_imports():
    cycles = import_cycles(imports(), module_level_only=True)
    assert not cycles, "module-level import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_hidden_in_functions():
    """An import inside a function that closes a circle is the same circle, only later (issue 21:
    services context <-> authn, web pages <-> api/oauth, web app <-> processes were such)."""
    cycles = import_cycles(imports(), module_level_only=False)
    assert not cycles, "import cycles (counting imports inside functions):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_every_module_has_one_layer():
    unplaced = sorted(name for name in sources() if layer_of(name) is None)
    assert not unplaced, (
        f"modules in no layer (add them to SERVER_LAYERS and docs/architecture.md): {unplaced}"
    )


def test_no_layer_imports_a_layer_above_it():
    """web -> plugins -> sp -> oauth -> services -> platform -> store -> core: so no lower layer
    imports web, the TUI, the CLI or the agent, and the services never reach OAuth or SP code."""
    problems = upward_imports(imports())
    assert not problems, "imports against the layers (docs/architecture.md):\n" + "\n".join(problems)


def test_the_layer_rules_catch_upward_and_hidden_imports():
    """The checker itself, on made-up graphs: an in-function import upward counts, and so does a
    circle closed inside a function (which the module-level check alone would miss)."""
    graph = (
        Import("grantd.services.context", "grantd.oauth.clients", 13, True),
        Import("grantd.core.review.model", "grantd.config", 26, True),
        Import("grantd.store", "grantd.web.pages", 5, False),
        Import("grantd.web.pages", "grantd.services.grants", 3, True),
    )
    assert upward_imports(graph) == [
        "grantd.core.review.model (core) imports grantd.config (platform) at line 26",
        "grantd.services.context (services) imports grantd.oauth.clients (oauth) at line 13",
        "grantd.store (store) imports grantd.web.pages (web) at line 5",
    ]
    hidden = (
        Import("grantd.web.app", "grantd.web.processes", 416, False),
        Import("grantd.web.processes", "grantd.web.app", 1, True),
    )
    assert import_cycles(hidden, module_level_only=True) == []
    assert import_cycles(hidden, module_level_only=False) == [["grantd.web.app", "grantd.web.processes"]]
    assert layer_of("grantd.elevate.hookspecs") == layer_of("grantd.hookspecs")
    assert (
        layer_of("grantd.elevate.cli") == 0
        and layer_of("grantd.core.tlog.anything") == len(SERVER_LAYERS) - 1
    )


@pytest.mark.parametrize("part", CLIENT_PARTS, ids=lambda part: part.name.replace(" ", "-"))
def test_client_parts_never_reach_server_modules(part):
    problems = violations(part, list(sources()), imports())
    assert not problems, f"{part.name} imports server code (or a server dependency):\n" + "\n".join(problems)


def test_the_rules_catch_a_server_import_even_through_an_allowed_module():
    """The checker itself, on a made-up graph: a function-level import counts, and so does a chain."""
    console = CLIENT_PARTS[-1]
    graph = (
        Import("grantd.tui.cli", "grantd.config", 39, False),
        Import("grantd.config", "grantd.services.context", 1, True),
        Import("grantd.tui.app", "sanic", 3, True),
    )
    assert violations(console, ["grantd.tui.cli", "grantd.tui.app"], graph) == [
        "grantd.tui.app -> sanic",
        "grantd.tui.cli -> grantd.config -> grantd.services",
        "grantd.tui.cli -> grantd.config -> grantd.services.context",
    ]
    assert violations(console, ["grantd.tui.cli"], graph[:1]) == []


# -- at run time ----------------------------------------------------------------------------------

PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)), file=sys.stderr))
sys.argv = ["grantd", *sys.argv[1:]]
runpy.run_module("grantd", run_name="__main__", alter_sys=True)
"""


@cache
def _baseline() -> frozenset[str]:
    """What the interpreter loads before any of our code (site, .pth hooks such as the editable finder)."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return frozenset(json.loads(out.stdout))


def loaded_by(*args: str) -> tuple[set[str], str]:
    """The modules `python -m grantd ARGS` has loaded when it exits (beyond the baseline), and stderr."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    line = next(line for line in result.stderr.splitlines() if line.startswith("MODULES "))
    modules = set(json.loads(line.removeprefix("MODULES "))) - _baseline()
    return modules, result.stderr


def _foreign(modules: set[str], allowed: tuple[str, ...]) -> list[str]:
    """Modules that are neither the standard library nor allowed (``__mp_main__`` & co. are aliases)."""
    return sorted(
        m
        for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names
        and not m.startswith("__")
        and not _matches(m, allowed)
    )


def _slowest(stderr: str, n: int = 8) -> str:
    rows = [
        line.split("|")
        for line in stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    ]
    rows.sort(key=lambda row: -int(row[1]))
    return "; ".join(f"{row[2].strip()} {int(row[1]) / 1000:.1f} ms" for row in rows[:n])


ELEVATE_MODULES = ("grantd", "grantd.cli", "grantd.elevate", "grantd.elevate.*")


def test_grantd_help_imports_no_subcommand_module():
    modules, stderr = loaded_by("--help")
    assert _foreign(modules, ("grantd", "grantd.cli")) == [], _slowest(stderr)


def test_grantd_elevate_help_loads_only_the_elevation_tool():
    modules, stderr = loaded_by("elevate", "--help")
    assert "grantd.elevate.cli" in modules
    assert _foreign(modules, ELEVATE_MODULES) == [], _slowest(stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="grantd elevate reads only a root-owned config")
def test_grantd_elevate_check_config_loads_only_the_tool_its_plugin_and_pluggy(tmp_path):
    tmp_path.chmod(0o755)
    config = tmp_path / "elevate.toml"
    config.write_text(
        f'allowed_issuers = ["https://idp.example.com"]\nallowed_approvers = ["*"]\n'
        f'audit_log = "{tmp_path / "audit.log"}"\njwks_cache_dir = ""\n'
    )
    config.chmod(0o644)
    modules, stderr = loaded_by("elevate", "--config", str(config), "--check-config")
    assert "grantd.plugins.elevate_default" in modules, stderr[-2000:]
    allowed = (
        *ELEVATE_MODULES,
        "grantd.commands",
        "grantd.plugins",
        "grantd.plugins.elevate_default",
        "pluggy",
        "pluggy.*",
    )
    assert _foreign(modules, allowed) == [], _slowest(stderr)
    for server_side in (
        "grantd.hookspecs",
        "grantd.config",
        "grantd.plugin_manager",
        "sanic",
        "httpx",
        "textual",
        "jwt",
    ):
        assert server_side not in modules


def test_the_dispatchers_one_line_helps_are_the_modules_own():
    """The static table (grantd --help without imports) and the real subparsers say the same."""
    for command, entry in COMMANDS.items():
        parser = argparse.ArgumentParser(prog="grantd")
        sub = parser.add_subparsers()
        __import__(entry.module, fromlist=["register"]).register(sub)
        helps = {action.dest: action.help for action in sub._choices_actions}
        assert helps.get(command) == entry.help, (command, entry.module)
    for module in {entry.module for entry in COMMANDS.values()}:
        parser = argparse.ArgumentParser(prog="grantd")
        sub = parser.add_subparsers()
        __import__(module, fromlist=["register"]).register(sub)
        assert set(sub.choices) == {c for c, e in COMMANDS.items() if e.module == module}, module


# -- where authorisation is decided ---------------------------------------------------------------

# The web layer's own refusals that are not "who may": the D8 cross-site check (a request hook).
REFUSALS_OUTSIDE_POLICY = {"grantd.web.csrf"}


def refusals_in(source: str, module: str) -> list[str]:
    """Calls in web code that refuse a known caller by themselves: ``forbidden(...)`` or
    ``Problem(403, ...)``. Such a rule belongs in grantd.core.policy (or the service that loads the
    record), where the authorisation matrix and the policy tests see it. (401, nobody or no valid
    credential, is authentication: grantd.services.authn and the routes that need a session.)"""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = (
            node.func.attr
            if isinstance(node.func, ast.Attribute)
            else node.func.id
            if isinstance(node.func, ast.Name)
            else ""
        )
        first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        status = first if isinstance(first, int) else None
        if name == "forbidden" or (name == "Problem" and status == 403):
            found.append(f"{module}:{node.lineno} {name}({status if status is not None else ''}...)")
    return sorted(found)


def test_routes_and_pages_leave_authorisation_to_policy():
    """docs/architecture.md, "Where authorisation is checked": a route asks grantd.core.policy (a
    whole-route rule such as may_manage_people) or hands the principal to a service that does; it
    never refuses a caller on its own."""
    problems = []
    for module, path in sources().items():
        if module.startswith("grantd.web") and module not in REFUSALS_OUTSIDE_POLICY:
            problems += refusals_in(path.read_text(encoding="utf-8"), module)
    assert not problems, "refusals decided in the web layer (move them to grantd.core.policy):\n" + "\n".join(
        problems
    )


def test_the_refusal_scan_sees_an_inline_rule():
    inline = "async def f(request):\n    if not p.admin:\n        raise forbidden('no')\n    raise Problem(403, 'x')\n"
    assert refusals_in(inline, "m") == ["m:3 forbidden(...)", "m:4 Problem(403...)"]
    assert refusals_in("raise Problem(404, 'no such route')\n", "m") == []
