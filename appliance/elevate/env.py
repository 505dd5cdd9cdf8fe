"""The command's environment: an allow-list of harmless variables from the caller, then fixed ones."""

from __future__ import annotations

import pwd
import re

from grantd.elevate.config import ElevateConfig

_KEEP = {
    "TERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "COLORTERM",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
    "SUDO_USER",
    "SUDO_UID",
    "SUDO_GID",
}
_NEVER_PREFIXES = (
    "LD_",
    "DYLD_",
    "PYTHON",
    "PERL",
    "RUBY",
    "GEM_",
    "NODE_",
    "BASH_FUNC_",
    "MALLOC_",
    "GCONV",
    "JAVA",
    "_JAVA",
    "GIT_",
    "SSL_",
    "OPENSSL_",
    "NLSPATH",
)
_NEVER = {
    "IFS",
    "BASH_ENV",
    "ENV",
    "CDPATH",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "GLOBIGNORE",
    "GLIBC_TUNABLES",
    "LOCPATH",
    "HOSTALIASES",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    "TMPDIR",
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "MAIL",
    "ZDOTDIR",
    "INPUTRC",
    "PROMPT_COMMAND",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "LESSOPEN",
    "LESSCLOSE",
}
_SAFE_VALUE = {
    "TERM": re.compile(r"[A-Za-z0-9_.+-]{1,64}"),
    "TZ": re.compile(r"[A-Za-z0-9_+:-][A-Za-z0-9_+:/-]{0,63}"),
}
_LOCALE_VALUE = re.compile(r"[A-Za-z0-9_.@:-]{1,64}")


def _dangerous(name: str) -> bool:
    return name in _NEVER or name.startswith(_NEVER_PREFIXES)


def sanitized_env(caller: dict[str, str], user: pwd.struct_passwd, cfg: ElevateConfig) -> dict[str, str]:
    """An allow-list of harmless variables from the caller (values checked), then fixed ones.

    LD_*, PYTHON*, IFS, BASH_ENV, ENV, CDPATH and friends never pass, not even through env_keep."""
    env: dict[str, str] = {}
    for name, value in caller.items():
        if _dangerous(name) or not (name in _KEEP or name.startswith("LC_") or name in cfg.env_keep):
            continue
        if name in _SAFE_VALUE and (not _SAFE_VALUE[name].fullmatch(value) or ".." in value):
            continue
        if (name.startswith("LC_") or name in ("LANG", "LANGUAGE")) and not _LOCALE_VALUE.fullmatch(value):
            continue
        env[name] = value
    env.update(
        {
            "PATH": cfg.path_env,
            "HOME": user.pw_dir or "/",
            "USER": user.pw_name,
            "LOGNAME": user.pw_name,
            "SHELL": user.pw_shell or "/bin/sh",
        }
    )
    return env
