"""A checked configuration: the values of each section, and the error that lists every problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from grantd.config.sections import (
    AdminSection,
    AuditSection,
    CibaSection,
    FederationSection,
    GrantsSection,
    LimitsSection,
    LogSection,
    McpSection,
    MetricsSection,
    NotifySection,
    OauthSection,
    PeopleSection,
    PluginsSection,
    RootSection,
    ServerSection,
    SessionsSection,
    SpSection,
    StorageSection,
    TokensSection,
    WebauthnSection,
)

S = TypeVar("S")


class ConfigError(Exception):
    """Raised with every problem found in a configuration file."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(where + "; ".join(problems))


@dataclass
class Config:
    """A checked configuration: each section a typed, frozen value (grantd.config.sections), and
    the values of sections declared by plugins and built-in parsers (``extra``, by section name)."""

    path: Path | None
    raw: dict[str, Any]
    sections: dict[str, Any]  # section name ("" for the top level) -> its grantd.config.sections instance
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # declared sections (grantd.config.extensions)

    def _section(self, name: str, kind: type[S]) -> S:
        value = self.sections[name]
        assert isinstance(value, kind)
        return value

    @property
    def server(self) -> ServerSection:
        return self._section("server", ServerSection)

    @property
    def log(self) -> LogSection:
        return self._section("log", LogSection)

    @property
    def metrics(self) -> MetricsSection:
        return self._section("metrics", MetricsSection)

    @property
    def admin(self) -> AdminSection:
        return self._section("admin", AdminSection)

    @property
    def audit(self) -> AuditSection:
        return self._section("audit", AuditSection)

    @property
    def storage(self) -> StorageSection:
        return self._section("storage", StorageSection)

    @property
    def tokens(self) -> TokensSection:
        return self._section("tokens", TokensSection)

    @property
    def ciba(self) -> CibaSection:
        return self._section("ciba", CibaSection)

    @property
    def grants(self) -> GrantsSection:
        return self._section("grants", GrantsSection)

    @property
    def limits(self) -> LimitsSection:
        return self._section("limits", LimitsSection)

    @property
    def webauthn(self) -> WebauthnSection:
        return self._section("webauthn", WebauthnSection)

    @property
    def sessions(self) -> SessionsSection:
        return self._section("sessions", SessionsSection)

    @property
    def people(self) -> PeopleSection:
        return self._section("people", PeopleSection)

    @property
    def federation(self) -> FederationSection:
        return self._section("federation", FederationSection)

    @property
    def oauth(self) -> OauthSection:
        return self._section("oauth", OauthSection)

    @property
    def mcp(self) -> McpSection:
        return self._section("mcp", McpSection)

    @property
    def sp(self) -> SpSection:
        return self._section("sp", SpSection)

    @property
    def notify(self) -> NotifySection:
        return self._section("notify", NotifySection)

    @property
    def plugins(self) -> PluginsSection:
        return self._section("plugins", PluginsSection)

    @property
    def version(self) -> int:
        return self._section("", RootSection).version

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def __repr__(self) -> str:
        return f"Config(path={self.path})"
