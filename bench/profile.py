"""Reading a server's cProfile file: the functions where the time goes, with readable locations."""

from __future__ import annotations

import pstats
import sysconfig
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _where(filename: str) -> str:
    """Our files relative to the repository, others by package, so the list fits a terminal."""
    prefixes = [
        (str(ROOT) + "/", ""),
        (sysconfig.get_paths()["purelib"] + "/", ""),
        (sysconfig.get_paths()["stdlib"] + "/", ""),
    ]
    for prefix, replacement in prefixes:
        if filename.startswith(prefix):
            return replacement + filename[len(prefix) :]
    return filename


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":  # built-ins such as <method 'execute' of 'sqlite3.Cursor' objects>
        return name
    return f"{_where(filename)}:{line}({name})"


def _rows(
    stats: Any, key: int, top: int, only: tuple[str, ...] = ()
) -> list[tuple[tuple[str, int, str], Any]]:
    """(function, (primitive calls, calls, own time, cumulative time, callers)) sorted by column `key`;
    with `only`, the functions in files under those folders of the repository."""
    items = stats.stats.items()
    if only:
        items = [(f, row) for f, row in items if any(f[0].startswith(f"{ROOT}/{folder}/") for folder in only)]
    return sorted(items, key=lambda item: item[1][key], reverse=True)[:top]


def _print_rows(title: str, rows: list[Any], total: float) -> None:
    print(f"\n{title}")
    print(f"{'calls':>10}{'own s':>9}{'cum s':>9}{'cum %':>7}  function")
    for func, (_, calls, own, cumulative, _) in rows:
        print(f"{calls:>10,}{own:>9.3f}{cumulative:>9.3f}{100 * cumulative / total:>6.1f}%  {_label(func)}")


def print_profile(path: Path, top: int) -> None:
    stats = pstats.Stats(str(path))
    total = max(stats.total_tt, 1e-9)  # type: ignore[attr-defined]
    # Sanic runs on uvloop, whose waiting happens in C and is not counted: the total is work.
    print(
        f"profiled {total:.2f} s of work in the server's main thread (start-up and shut-down included; "
        "percentages are of this total)"
    )
    _print_rows(
        f"top {top} by cumulative time (time in the function and everything it calls)",
        _rows(stats, 3, top),
        total,
    )
    _print_rows(f"top {top} by own time (time in the function itself)", _rows(stats, 2, top), total)
    _print_rows(
        f"top {top} of our code (appliance/, plugins/) by cumulative time",
        _rows(stats, 3, top, only=("appliance", "plugins")),
        total,
    )
