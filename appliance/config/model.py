"""A checked configuration: the values of each section, and the error that lists every problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """Raised with every problem found in a configuration file."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(where + "; ".join(problems))


class Section:
    """Attribute access to one section's resolved values."""

    def __init__(self, name: str, values: dict[str, Any], secret_keys: set[str]):
        self._name = name
        self._values = values
        self._secret_keys = secret_keys

    def __getattr__(self, item: str) -> Any:
        try:
            return self._values[item]
        except KeyError:
            raise AttributeError(f"{self._name}.{item}") from None

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:  # never print secrets
        shown = {k: ("***" if k in self._secret_keys and v else v) for k, v in self._values.items()}
        return f"Section({self._name}, {shown})"


@dataclass
class Config:
    path: Path | None
    raw: dict[str, Any]
    sections: dict[str, Section]
    warnings: list[str] = field(default_factory=list)

    def __getattr__(self, item: str) -> Any:
        sections = self.__dict__.get("sections", {})
        if item in sections:
            return sections[item]
        raise AttributeError(item)

    @property
    def version(self) -> int:
        return int(self.sections[""].version)

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def __repr__(self) -> str:
        return f"Config(path={self.path})"
