"""How a page is made: templates, static files, the viewer (who is signed in), the page guard and
the error page. Shared by the page routes (grantd.web.pages) and the API routes that answer with a
page (OAuth's /authorize, the device page, federation callbacks), so none of them imports another
route module (docs/architecture.md, the layers)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sanic import Request
from sanic.response import HTTPResponse, html, redirect

from grantd.core.display import escape_text, non_ascii, quote_arg, summarize_argv
from grantd.core.errors import Problem
from grantd.core.principals import Kind, Principal
from grantd.services.sessions import SESSION_COOKIE, session_id_of
from grantd.web.api.common import principal_of, services_of

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_CSP,
    "Cache-Control": "no-store",  # pages show a person's data and their session's state
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # /register?token=... must not leak through a Referer
}
DEFAULT_NEXT = "/grants"
MAX_NEXT = 2000


# -- static files ---------------------------------------------------------------------------------

_CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def _load_static() -> dict[str, StaticFile]:
    """Every file of static/, read once: served from memory, so no request path ever reaches the
    file system (nothing to traverse) and a bundle needs only the files themselves."""
    files = {}
    for path in sorted(STATIC.iterdir()) if STATIC.is_dir() else []:
        if path.is_file() and path.suffix in _CONTENT_TYPES:
            body = path.read_bytes()
            files[path.name] = StaticFile(
                body, _CONTENT_TYPES[path.suffix], '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            )
    return files


STATIC_FILES = _load_static()


def static_url(name: str) -> str:
    """The file's URL with its content hash, so a new version is never taken from a cache."""
    found = STATIC_FILES.get(name)
    return f"/static/{name}?v={found.etag.strip(chr(34))[:12]}" if found else f"/static/{name}"


# -- templates ------------------------------------------------------------------------------------


def format_ms(value: int | None) -> str:
    if value is None:
        return "—"
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_ms(value: int | None) -> str:
    return "" if value is None else datetime.fromtimestamp(value / 1000, UTC).isoformat()


def format_seconds(value: int | None) -> str:
    if value is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} s"


def _text(value: Any) -> str:
    """Any value as one escaped line: control and invisible characters become visible escapes."""
    return escape_text("" if value is None else str(value))


_BROWSERS = (
    ("Edg/", "Edge"),
    ("OPR/", "Opera"),
    ("Firefox/", "Firefox"),
    ("HeadlessChrome/", "Headless Chrome"),
    ("Chrome/", "Chrome"),
    ("Chromium/", "Chromium"),
    ("Safari/", "Safari"),
)
_SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iOS"),
    ("iPad", "iPadOS"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def browser_name(user_agent: str | None) -> str:
    """ "Chrome on Linux" from a User-Agent line (the whole line stays in the title attribute)."""
    ua = user_agent or ""
    browser = next((name for token, name in _BROWSERS if token in ua), "")
    system = next((name for token, name in _SYSTEMS if token in ua), "")
    if browser and system:
        return f"{browser} on {system}"
    return browser or system or (_text(ua)[:60] if ua else "unknown browser")


def _text_of(value: Any) -> str:
    """A value (a string, a list of arguments) as the text whose code points a badge lists."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "".join(_text_of(item) for item in value)
    return str(value)


def command_text(request_body: Mapping[str, Any]) -> str:
    """A grant's command on one line (escaped, quoted where needed) or its permissions."""
    if request_body.get("command"):
        return summarize_argv(request_body["command"])
    return ", ".join(escape_text(str(p)) for p in request_body.get("permissions") or ())


def _pretty_json(value: Any) -> str:
    return escape_text(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)).replace("\\n", "\n")


ENV = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=select_autoescape(["html"], default_for_string=True, default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    text=_text,
    arg=quote_arg,
    argv_line=summarize_argv,
    when=format_ms,
    iso=iso_ms,
    seconds=format_seconds,
    pretty_json=_pretty_json,
    browser=browser_name,
    codepoints=lambda value: non_ascii(_text_of(value)),
    command_text=command_text,
)
# A long command must not bury who, where and the decision (issue 20 item 4): the approval page lists
# the first ARGV_SHOWN arguments and folds the rest, an argument longer than ARG_FOLD characters (as
# shown, escaped) folds after its start, so does a reason longer than TEXT_FOLD, and an inbox entry
# shows CMD_FOLD characters of its command. tests/system/browser/test_grant_screens.py holds the sizes.
ARGV_SHOWN = 4
ARG_FOLD = 160
TEXT_FOLD = 60
CMD_FOLD = 160
ENV.globals.update(
    static_url=static_url, argv_shown=ARGV_SHOWN, arg_fold=ARG_FOLD, text_fold=TEXT_FOLD, cmd_fold=CMD_FOLD
)


def render(template: str, status: int = 200, **context: Any) -> HTTPResponse:
    body = ENV.get_template(template).render(**context)
    return html(body, status=status, headers=PAGE_HEADERS)


# -- who is asking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    """The signed-in person a page is rendered for."""

    principal: Principal
    person: Mapping[str, Any]

    @property
    def email(self) -> str:
        return self.principal.email

    @property
    def admin(self) -> bool:
        return self.principal.admin

    @property
    def name(self) -> str:
        return str(self.person.get("name") or self.principal.email)


async def viewer_of(request: Request) -> Viewer | None:
    """The person whose session cookie the request carries, or None (no session, an ended or
    revoked one, or a credential that is not a person's: pages are for people)."""
    try:
        principal = await principal_of(request)
    except Problem:
        return None
    if principal is None or principal.kind is not Kind.PERSON:
        return None
    person = await services_of(request).store.people.get(principal.id)
    if person is None or person.get("status", "active") != "active":
        return None
    return Viewer(principal, person)


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a local absolute path on this origin only (``/x?y``), never
    ``//host``, ``/\\host``, a scheme, or anything with control characters or backslashes."""
    if not value or len(value) > MAX_NEXT or not value.startswith("/") or value.startswith("//"):
        return DEFAULT_NEXT
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or not value.isprintable():
        return DEFAULT_NEXT
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return DEFAULT_NEXT
    return value


def current_session_id(request: Request) -> str | None:
    """The id of the session the request's cookie names, to mark "this browser" in lists."""
    cookie = request.cookies.get(SESSION_COOKIE)
    return session_id_of(cookie) if cookie else None


def _here(request: Request) -> str:
    return request.path + (f"?{request.query_string}" if request.query_string else "")


def login_redirect(request: Request) -> HTTPResponse:
    response = redirect("/login?next=" + quote(_here(request), safe="/"), status=303)
    response.headers["Cache-Control"] = "no-store"
    return response


Handler = Callable[..., Awaitable[HTTPResponse]]


def page(*, admin: bool = False) -> Callable[[Handler], Handler]:
    """A page for a signed-in person (``admin``: administrators only, others get a 403 page).
    Problems the page's reads raise become HTML error pages, not problem+json."""

    def wrap(handler: Handler) -> Handler:
        @wraps(handler)
        async def run(request: Request, *args: Any, **kwargs: Any) -> HTTPResponse:
            viewer = await viewer_of(request)
            if viewer is None:
                return login_redirect(request)
            if admin and not viewer.admin:
                return error_page(viewer, 403, "Administrators only", "This page is for administrators.")
            try:
                return await handler(request, viewer, *args, **kwargs)
            except Problem as exc:
                if exc.status >= 500:
                    raise
                return error_page(viewer, exc.status, exc.title, exc.detail)

        return run

    return wrap


def error_page(viewer: Viewer | None, status: int, title: str, detail: str) -> HTTPResponse:
    return render("error.html", status=status, viewer=viewer, title=title, detail=detail, status_code=status)


def federation_buttons(request: Request, target: str) -> list[dict[str, str]]:
    """The upstream providers a person may sign in with (grantd.web.api.federation), as links."""
    suffix = "" if target == DEFAULT_NEXT else "?next=" + quote(target, safe="/")
    return [
        {"name": p.name, "href": f"/auth/federated/{quote(p.id, safe='')}{suffix}"}
        for p in services_of(request).federation
        if p.can_sign_in
    ]
