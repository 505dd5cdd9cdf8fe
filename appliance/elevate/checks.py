"""Verifying the grant: its shape, signature and times, then the `elevate_verify` hook (audience,
target host, approver, exact command in plugins/elevate_default.py, then any site plugin)."""

from __future__ import annotations

import sys
from typing import Any

from grantd.elevate.approvals import approvals_problem
from grantd.elevate.config import ElevateConfig, check_root_owned
from grantd.elevate.errors import EXIT_ERROR, Stop, config_error, refused
from grantd.elevate.jwks import JwksCache

GRANT_TYPES = ("once", "timed", "always")
# Reason texts (the specification's Errors section) -> stable codes for the JSON line. A reason
# may add details after a colon ("not enough approvals: 1 distinct approver, ...").
REASON_CODES = {
    "issuer not in allowed issuers": "issuer_not_allowed",
    "audience mismatch": "audience_mismatch",
    "target_host differs from the system host name": "target_host_mismatch",
    "approver not allowed": "approver_not_allowed",
    "rule-approved grant not allowed on this host": "policy_not_allowed",
    "not enough approvals": "not_enough_approvals",
    "cmd_hash mismatch (command differs from the granted command)": "cmd_hash_mismatch",
}


def reason_code(reason: str) -> str:
    """The stable code of a reason text (with or without details after a colon); else a plugin's."""
    head = reason.split(": ", 1)[0] if reason not in REASON_CODES else reason
    return REASON_CODES.get(head, "refused_by_plugin")


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    import jwt

    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise refused("malformed_token", "malformed token (not a JWT)") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        raise refused("malformed_token", "malformed token (no iss)")
    typ = header.get("typ")
    if isinstance(typ, str) and typ.strip().lower().removeprefix("application/") == "at+jwt":
        # an OAuth access token (RFC 9068, D3) is never a grant token, whatever claims it carries
        raise refused("malformed_token", "malformed token (an access token, not a grant token)")
    return header, claims


def verify_signature(token: str, header: dict[str, Any], issuer: str, cache: JwksCache) -> None:
    import jwt

    if header.get("alg") != "EdDSA":
        raise refused("bad_signature", "bad signature (algorithm must be EdDSA)")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise refused("bad_signature", "bad signature (no kid)")
    key = cache.key(issuer, kid)
    try:
        jwt.decode(
            token,
            key,
            algorithms=["EdDSA"],
            options={
                "verify_exp": False,
                "verify_aud": False,
                "verify_iss": False,
                "verify_nbf": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise refused("bad_signature", "bad signature") from None
    except jwt.PyJWTError as exc:
        raise refused("bad_signature", f"bad signature ({exc})") from None


def check_times(claims: dict[str, Any], leeway: int, now: float) -> None:
    exp = claims.get("exp")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise refused("malformed_token", "malformed token (exp must be an integer)")
    if now > exp + leeway:
        raise refused("expired", "expired")
    nbf = claims.get("nbf")
    if isinstance(nbf, int) and now + leeway < nbf:
        raise refused("not_yet_valid", "token not yet valid")


def check_shape(claims: dict[str, Any]) -> None:
    for name in ("sub", "aud", "target_host", "grant_id", "grant_type", "decided_by"):
        if not isinstance(claims.get(name), str) or not claims[name]:
            raise refused("malformed_token", f"malformed token (claim {name} missing or not a string)")
    if claims["grant_type"] not in GRANT_TYPES:
        raise refused("malformed_token", "malformed token (unknown grant_type)")
    run_as = claims.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not run_as):
        raise refused("malformed_token", "malformed token (run_as must be a user name)")
    problem = approvals_problem(claims)
    if problem:
        raise refused("malformed_token", f"malformed token ({problem})")


def consume_url(claims: dict[str, Any]) -> str:
    """Where the grant is consumed, and so the `htu` its DPoP proof names (D16)."""
    from urllib.parse import quote

    return f"{claims['iss']}/api/grants/{quote(claims['grant_id'], safe='')}/consume"


def check_binding(
    claims: dict[str, Any], token: str, proof: str | None, leeway: int, now: float
) -> str | None:
    """A bound AuthZ-JWT (`cnf.jkt`) runs only with a fresh DPoP proof by that key for
    POST {iss}/api/grants/{id}/consume (`ath` = the token's hash); the proof is checked here and
    forwarded to consume, where the issuer checks it again and refuses a replay. Returns the
    proof to forward (None for an unbound token: a proof sent with one is not forwarded)."""
    cnf = claims.get("cnf")
    if cnf is None:
        return None
    if not isinstance(cnf, dict) or not isinstance(cnf.get("jkt"), str) or not cnf["jkt"]:
        raise refused("malformed_token", "malformed token (cnf must be an object with jkt)")
    if proof is None:
        raise refused(
            "dpop_required",
            "the grant is bound to a key (cnf.jkt): a DPoP proof is required "
            '(--grant-stdin {"authz_jwt": ..., "dpop": ...})',
        )
    from grantd.dpop import DEFAULT_MAX_AGE, DpopError, verify_proof

    try:
        verify_proof(
            proof,
            method="POST",
            htu=consume_url(claims),
            now=now,
            access_token=token,
            expected_jkt=cnf["jkt"],
            max_age=DEFAULT_MAX_AGE,
            leeway=leeway,
        )
    except DpopError as exc:
        raise refused("bad_dpop_proof", f"bad DPoP proof: {exc.reason}") from None
    return proof


def plugin_manager(cfg: ElevateConfig) -> Any:
    """The default checks plus the site plugins the config names; nothing picked up implicitly."""
    import importlib

    import pluggy

    from grantd.elevate import hookspecs

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(
        importlib.import_module("grantd.plugins.elevate_default"), name="grantd.plugins.elevate_default"
    )
    for directory in cfg.plugin_dirs:
        try:
            check_root_owned(directory, "plugin directory")
        except FileNotFoundError:
            raise config_error(f"plugin directory {directory} does not exist") from None
        if directory not in sys.path:
            sys.path.insert(0, directory)
    for name in cfg.plugins:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported as a config error
            raise config_error(f"cannot import plugin {name!r}: {exc}") from None
        source = getattr(module, "__file__", None)
        if source:
            check_root_owned(source, "plugin file")
        pm.register(module, name=name)
    return pm


def run_checks(pm: Any, claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> None:
    try:
        results = pm.hook.elevate_verify(claims=claims, argv=argv, context=context)
    except Exception as exc:  # noqa: BLE001 - a broken plugin refuses, never allows
        raise Stop(
            EXIT_ERROR, "plugin", f"an elevate_verify plugin failed: {exc.__class__.__name__}: {exc}"
        ) from None
    reasons: list[str] = []
    for result in results:
        if isinstance(result, str):
            reasons.append(result)
        elif result:
            reasons.extend(str(r) for r in result)
    if reasons:
        stop = refused(reason_code(reasons[0]), reasons[0])
        stop.reasons = reasons
        raise stop
