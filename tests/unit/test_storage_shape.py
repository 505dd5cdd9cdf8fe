"""The storage backends stay shaped like the contract (issue 21): packages of small modules, the
numbered migrations as ``.sql`` files, and no helper written twice."""

from __future__ import annotations

import ast
from pathlib import Path

from grantd.store.migrations import load, parse

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("storage_sqlite", "storage_postgres")
# The helpers that live once in grantd.store (rows, sql, oauth, files); no backend defines its own.
SHARED = {
    "_json",
    "_page",
    "_after",
    "_fold",
    "_grant",
    "_delegation",
    "_person",
    "_credential",
    "_registration",
    "_was_live",
    "_union_scope",
    "_key",
    "_make_private_dirs",
    "_create_private_file",
    "_check_private",
}


def _functions(path: Path) -> dict[str, str]:
    """Every function and method of a module: qualified name -> its code (the AST, names and docstrings aside)."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body[1:] if ast.get_docstring(child) else child.body
                found[prefix + child.name] = ast.dump(ast.Module(body=body, type_ignores=[]))
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(ast.parse(path.read_text()), f"{path.relative_to(ROOT)}:")
    return found


def test_no_file_under_plugins_is_over_600_lines_nor_one_of_grantd_store_and_grantd_testing_over_800():
    def longer(folder: str, most: int) -> dict[str, int]:
        return {
            str(p.relative_to(ROOT)): n
            for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > most
        }

    assert longer("plugins", 600) == {}
    assert longer("appliance/store", 800) == {} and longer("appliance/testing", 800) == {}


def test_each_backend_is_a_package_with_a_module_per_record_kind():
    kinds = {"keys", "agents", "grants", "delegations", "rates", "people", "oauth", "migrations", "store"}
    for backend in BACKENDS:
        folder = ROOT / "plugins" / backend
        assert not (ROOT / "plugins" / f"{backend}.py").exists()
        assert kinds <= {p.stem for p in folder.glob("*.py")}, backend
    assert {"loop", "pool", "connection"} <= {
        p.stem for p in (ROOT / "plugins" / "storage_postgres").glob("*.py")
    }


def test_no_helper_is_written_twice():
    sqlite = {
        n: code
        for p in (ROOT / "plugins" / "storage_sqlite").glob("*.py")
        for n, code in _functions(p).items()
    }
    postgres = {
        n: code
        for p in (ROOT / "plugins" / "storage_postgres").glob("*.py")
        for n, code in _functions(p).items()
    }
    memory = {
        n: code
        for p in (ROOT / "appliance" / "testing" / "memory_store").glob("*.py")
        for n, code in _functions(p).items()
    }
    trivial = ast.dump(ast.Module(body=[ast.Pass()], type_ignores=[]))
    by_code: dict[str, list[str]] = {}
    for name, code in {**sqlite, **postgres}.items():
        helper = name.rpartition(".")[2].rpartition(":")[2]
        # helpers (private names; the contract's methods may well delegate alike), past one-liners
        if helper.startswith("_") and not helper.startswith("__") and code != trivial and len(code) > 200:
            by_code.setdefault(code, []).append(name)
    twice = [
        names
        for names in by_code.values()
        if any(n.startswith("plugins/storage_sqlite") for n in names)
        and any(n.startswith("plugins/storage_postgres") for n in names)
    ]
    assert twice == []
    defined_again = sorted(
        n for n in {*sqlite, *postgres, *memory} if n.rpartition(":")[2].rpartition(".")[2] in SHARED
    )
    assert defined_again == []


def test_migrations_are_numbered_sql_files_that_the_backends_load():
    from grantd.plugins import storage_postgres, storage_sqlite

    for backend, migrations in (
        (storage_sqlite, storage_sqlite.MIGRATIONS),
        (storage_postgres, storage_postgres.MIGRATIONS),
    ):
        files = sorted((ROOT / "plugins" / backend.__name__.rpartition(".")[2] / "schema").glob("*.sql"))
        assert [int(f.name[:4]) for f in files] == list(range(1, len(files) + 1))
        assert [(v, name) for v, name, _ in migrations] == [
            (m.version, m.name) for m in load(backend.__name__, "schema")
        ]
        assert len(migrations) == len(files)


def test_a_migration_file_names_its_number_and_splits_into_statements():
    text = "-- 3: a b c\n-- a comment\nCREATE TABLE t (\n    a TEXT\n);\nCREATE INDEX t_a ON t (a);\n"
    parsed = parse("0003_a_b_c.sql", text)
    assert (parsed.version, parsed.name) == (3, "a b c")
    assert parsed.statements == ("CREATE TABLE t (\n    a TEXT\n)", "CREATE INDEX t_a ON t (a)")
    for name, head in (
        ("0003_x.sql", "-- 4: wrong number"),
        ("3_x.sql", "-- 3: short name"),
        ("0003_x.sql", "no head"),
    ):
        try:
            parse(name, head + "\nSELECT 1;\n")
        except ValueError:
            continue
        raise AssertionError(f"{name} / {head!r} was accepted")
