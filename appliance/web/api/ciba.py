"""CIBA's backchannel authentication endpoint (D16; grantd.oauth.ciba_flow): thin — parse, hand over,
answer in OAuth's words. The CIBA grant at /token is dispatched in grantd.web.api.oauth."""

from __future__ import annotations

import json as jsonlib
from typing import Any
from urllib.parse import parse_qsl

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.oauth import ciba_flow
from grantd.oauth.errors import OAuthError, invalid_request
from grantd.web.api.common import proof_request, services_of
from grantd.web.api.oauth import CORS, FORM, NO_STORE, _preflight, _refuse_repeats, _Repeated, oauth_error

bp = Blueprint("ciba")


def ciba_params(request: Request) -> dict[str, Any]:
    """A form or a JSON object; in JSON, ``authorization_details`` may be the array itself."""
    body = request.body or b""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if not body.strip():
        return {}
    if media == "application/json":
        try:
            data = jsonlib.loads(body, object_pairs_hook=_refuse_repeats)
        except _Repeated as exc:
            raise invalid_request(f"{str(exc)[:60]} is given more than once") from None
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise invalid_request("malformed JSON body") from None
        if not isinstance(data, dict):
            raise invalid_request("the JSON body must be an object")
        params: dict[str, Any] = {}
        for key, value in data.items():
            if value is None:
                continue
            if key == "authorization_details" and isinstance(value, list):
                params[key] = value
            elif isinstance(value, bool) or not isinstance(value, str | int):
                raise invalid_request(f"{key[:60]} must be a string")
            else:
                params[str(key)] = str(value)
        return params
    if media in (FORM, ""):
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
        except (ValueError, UnicodeDecodeError):
            raise invalid_request("malformed form body") from None
        form: dict[str, Any] = {}
        for key, value in pairs:
            if key in form:
                raise invalid_request(f"{key[:60]} is given more than once")
            form[key] = value
        return form
    raise invalid_request("the body must be application/x-www-form-urlencoded or application/json")


@bp.post("/bc-authorize", name="bc_authorize")
async def bc_authorize(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        answer = await ciba_flow.bc_authorize(services, ciba_params(request), proof_request(request))
    except OAuthError as exc:
        return oauth_error(exc)
    return json(answer, headers={**NO_STORE, **CORS})


@bp.route("/bc-authorize", methods=["OPTIONS"], name="bc_authorize_preflight")
async def bc_authorize_preflight(request: Request) -> HTTPResponse:
    return _preflight("POST, OPTIONS")
