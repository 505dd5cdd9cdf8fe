"""The one TOML configuration file: schema, loading, validation, secrets and the generated dev config.

Validation reports every problem at once (each with the key's dotted path and, for a typo, a
"did you mean"), so an operator fixes the file in one pass instead of one restart per mistake.

Secrets (`admin.management_token`, and the secret keys of `[[federation.providers]]` tables,
which the provider type's factory reads through `read_secret`) may be written as
  "file:PATH"  - read from a file (relative paths are relative to the config file), or
  "env:NAME"   - read from an environment variable, or
  a literal    - accepted, but `grantd config validate` warns: keep secrets out of the file.

The package, by concern: `schema` (the keys, their defaults and meanings), `sections` (one typed, frozen dataclass per section), `model` (a checked
config and `ConfigError`), `validation` (checking a parsed file), `secretfiles` (file:/env: secrets,
fresh ones), `files` (reading and writing config files), `extensions` (sections declared by plugins and
built-in parsers: the approval policies); one key and its check are
`grantd.core.config_keys` (shared with parsers of sections declared elsewhere). Import from
`grantd.config`: the names below are its interface.
"""

from __future__ import annotations

from grantd.config.extensions import BUILTIN_SECTIONS, ConfigSection
from grantd.config.files import development_issuer, load, load_for_client, read_toml, render, write_new_config
from grantd.config.model import Config, ConfigError
from grantd.config.schema import CONFIG_ENV, CURRENT_VERSION, DEFAULT_CONFIG_NAME, SCHEMA, SECTION_HELP
from grantd.config.secretfiles import new_secret, resolve_secret, write_secret_file
from grantd.config.sections import SECTION_TYPES
from grantd.config.validation import validate
from grantd.core.config_keys import Key, check_value

__all__ = [
    "BUILTIN_SECTIONS",
    "CONFIG_ENV",
    "CURRENT_VERSION",
    "DEFAULT_CONFIG_NAME",
    "SCHEMA",
    "SECTION_HELP",
    "Config",
    "ConfigError",
    "ConfigSection",
    "Key",
    "SECTION_TYPES",
    "check_value",
    "development_issuer",
    "load",
    "load_for_client",
    "new_secret",
    "read_toml",
    "render",
    "resolve_secret",
    "validate",
    "write_new_config",
    "write_secret_file",
]
