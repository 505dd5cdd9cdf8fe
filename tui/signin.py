"""Signing a person in on a terminal with the device authorization grant (RFC 8628), and keeping them
signed in: `grantd login`, `grantd logout`, and the session `grantd tui` uses by default.

The flow: read the issuer's discovery document; ``POST device_authorization_endpoint`` as the
built-in public client ``grantd-cli``; show the user code and the URL; poll ``token_endpoint``
honouring ``interval`` and ``slow_down`` until the person approves (or denies, or the code expires)
on ``/device`` in a browser; then read who signed in from ``userinfo_endpoint``.

The session is one JSON file, ``{issuer, client_id, refresh_token, access_token, expires_at, email,
name, scope}`` (``scope`` names ``admin`` when `grantd login --admin` asked for administrator
rights: D12, a device token has them only then, and only if an administrator approved), created
0600 in a directory made 0700 (default ``~/.config/grantd/session.json``, or
``$XDG_CONFIG_HOME/grantd/session.json``; ``--session-file`` or ``$GRANTD_SESSION_FILE``). It is
written atomically (a new file, then a rename) so a crash never leaves half a token. Refresh tokens
rotate: every refresh stores the new one; a refused refresh deletes the stored session (the person
signs in again).

No Textual here: `grantd login` and `grantd logout` import only httpx and the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from grantd.client.files import PrivateFileError, config_dir, private_directory, write_private
from grantd.client.problems import read_problem
from grantd.core.display import escape_text
from grantd.tui.client import Credential

CLIENT_ID = "grantd-cli"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SCOPE = "openid email profile offline_access"
ADMIN_SCOPE = SCOPE + " admin"  # --admin: administrator rights, if an administrator approves (D12)
SESSION_ENV = "GRANTD_SESSION_FILE"
ISSUER_ENV = "GRANTD_ISSUER"
CONFIG_ENV = "GRANTD_CONFIG"
DEFAULT_CONFIG_NAME = "grantd.toml"
REFRESH_MARGIN = 30  # seconds before expiry an access token is refreshed
SLOW_DOWN_STEP = 5
MAX_INTERVAL = 60
LOCK_WAIT = 30.0  # seconds to wait for another process's refresh of the same session


class SignInError(Exception):
    """The sign-in did not work; the message says why, for a person."""


class SignInRequired(SignInError):
    """No usable session: sign in (again)."""


# -- the session file -------------------------------------------------------------------------------


@dataclass
class StoredSession:
    issuer: str
    refresh_token: str
    access_token: str
    expires_at: int  # seconds since the epoch when the access token ends
    email: str
    name: str
    client_id: str = CLIENT_ID
    scope: str = SCOPE  # what the server granted (an "admin" in it: administrator rights were asked for)

    @property
    def asked_admin(self) -> bool:
        return "admin" in self.scope.split()

    @classmethod
    def from_json(cls, data: Any) -> StoredSession:
        if not isinstance(data, dict):
            raise ValueError("not an object")
        fields = {k: data.get(k) for k in ("issuer", "refresh_token", "access_token", "email", "name")}
        if (
            not all(isinstance(v, str) for v in fields.values())
            or not fields["issuer"]
            or not fields["refresh_token"]
        ):
            raise ValueError("missing fields")
        expires_at = data.get("expires_at")
        if not isinstance(expires_at, int):
            raise ValueError("expires_at")
        client_id = data.get("client_id") if isinstance(data.get("client_id"), str) else CLIENT_ID
        scope = (
            data.get("scope") if isinstance(data.get("scope"), str) else SCOPE
        )  # files from before scopes were kept
        return cls(
            expires_at=expires_at,
            client_id=str(client_id),
            scope=str(scope),
            **{k: str(v) for k, v in fields.items()},
        )

    def fresh(self, now: float) -> bool:
        return bool(self.access_token) and now < self.expires_at - REFRESH_MARGIN

    @property
    def label(self) -> str:
        return f"{self.name} <{self.email}>" if self.name and self.name != self.email else self.email

    def __repr__(self) -> str:  # never print the tokens
        return f"StoredSession(issuer={self.issuer!r}, email={self.email!r})"


def default_session_path() -> Path:
    if os.environ.get(SESSION_ENV):
        return Path(os.environ[SESSION_ENV]).expanduser()
    return config_dir() / "session.json"


class SessionFile:
    """The stored session: read, written 0600 in a 0700 directory (atomically), deleted."""

    def __init__(self, path: Path | None = None):
        self.path = (path or default_session_path()).expanduser()

    def load(self) -> StoredSession | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SignInError(f"cannot read the session file {self.path}: {exc.strerror}") from None
        try:
            return StoredSession.from_json(json.loads(text))
        except ValueError:
            return None  # unreadable: as good as none (signing in again replaces it)

    def _directory(self) -> Path:
        """The file's directory (grantd.client.files): made 0700 when it is new or grantd's own
        (``~/.config/grantd``, tightened if someone loosened it); another existing directory
        (``--session-file`` somewhere else) is refused if others may write to it."""
        try:
            return private_directory(self.path.parent, own=self.path.parent == default_session_path().parent)
        except PrivateFileError as exc:
            raise SignInError(str(exc)) from None

    def save(self, session: StoredSession) -> None:
        data = (json.dumps(asdict(session), indent=2) + "\n").encode()
        try:
            write_private(self.path, data, own_directory=self.path.parent == default_session_path().parent)
        except PrivateFileError as exc:
            raise SignInError(str(exc)) from None

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the session's lock file (``session.json.lock``, 0600): one refresh at a time across
        processes (two `grantd tui` windows), since presenting a refresh token twice revokes its family."""
        directory = self._directory()
        fd = os.open(directory / f"{self.path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise SignInError(f"{self.path} stays locked by another grantd process") from None
                    await asyncio.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def delete(self) -> bool:
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False


# -- the protocol ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceAuthorization:
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int

    def __repr__(self) -> str:  # the device code is a secret
        return (
            f"DeviceAuthorization(user_code={self.user_code!r}, verification_uri={self.verification_uri!r})"
        )


def _oauth_error(response: httpx.Response) -> tuple[str, str]:
    """(error code, description): the server's words, escaped (grantd.client.problems, D18)."""
    problem = read_problem(response)
    return problem.code, problem.detail or problem.reason or "request failed"


Sleep = Callable[[float], Awaitable[None]]


class DeviceSignIn:
    """The OAuth side of a terminal sign-in against one issuer (async; `grantd login` runs it with asyncio.run)."""

    def __init__(
        self,
        issuer: str,
        *,
        client_id: str = CLIENT_ID,
        http: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
        timeout: float = 15.0,
    ):
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(timeout=timeout, headers={"User-Agent": "grantd-cli"})
        self.sleep = sleep
        self.wall_clock = wall_clock
        self._metadata: dict[str, Any] | None = None

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def __aenter__(self) -> DeviceSignIn:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            try:
                response = await self.http.get(f"{self.issuer}/.well-known/openid-configuration")
            except httpx.HTTPError as exc:
                raise SignInError(f"cannot reach {self.issuer}: {exc}") from None
            if response.status_code != 200:
                raise SignInError(f"{self.issuer} has no discovery document (HTTP {response.status_code})")
            try:
                document = response.json()
            except ValueError:
                raise SignInError(f"{self.issuer}'s discovery document is not JSON") from None
            if not isinstance(document, dict):
                raise SignInError(f"{self.issuer}'s discovery document is not an object")
            if document.get("issuer", self.issuer).rstrip("/") != self.issuer:
                raise SignInError(
                    f"the discovery document names another issuer: {escape_text(str(document.get('issuer'))[:200])}"
                )
            self._metadata = document
        return self._metadata

    async def endpoint(self, name: str, fallback: str) -> str:
        value = (await self.metadata()).get(name)
        if isinstance(value, str) and value.startswith(("https://", "http://")):
            return value
        return f"{self.issuer}{fallback}"

    async def _post(
        self, url: str, form: dict[str, str], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        try:
            return await self.http.post(
                url, data=form, headers={"Accept": "application/json", **(headers or {})}
            )
        except httpx.HTTPError as exc:
            raise SignInError(f"cannot reach {self.issuer}: {exc}") from None

    async def start(self, scope: str = SCOPE) -> DeviceAuthorization:
        url = await self.endpoint("device_authorization_endpoint", "/device_authorization")
        response = await self._post(url, {"client_id": self.client_id, "scope": scope})
        if response.status_code != 200:
            error, description = _oauth_error(response)
            raise SignInError(f"the server refused to start a sign-in: {error}: {description}")
        body = response.json()
        try:
            return DeviceAuthorization(
                device_code=str(body["device_code"]),
                user_code=str(body["user_code"]),
                verification_uri=str(body["verification_uri"]),
                verification_uri_complete=str(
                    body.get("verification_uri_complete") or body["verification_uri"]
                ),
                expires_in=int(body["expires_in"]),
                interval=int(body.get("interval") or 5),
            )
        except (KeyError, TypeError, ValueError):
            raise SignInError("the server's device authorization answer is incomplete") from None

    async def wait(self, authorization: DeviceAuthorization) -> dict[str, Any]:
        """Poll the token endpoint until the person decides; the token answer. Waits ``interval``
        before each poll and 5 s longer after each ``slow_down`` (RFC 8628 §3.5)."""
        url = await self.endpoint("token_endpoint", "/token")
        interval = max(1, authorization.interval)
        deadline = time.monotonic() + authorization.expires_in
        form = {
            "grant_type": DEVICE_GRANT,
            "device_code": authorization.device_code,
            "client_id": self.client_id,
        }
        while True:
            await self.sleep(interval)
            if time.monotonic() > deadline:
                raise SignInError("the code expired before it was approved; sign in again")
            response = await self._post(url, form)
            if response.status_code == 200:
                return dict(response.json())
            error, description = _oauth_error(response)
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                interval = min(MAX_INTERVAL, interval + SLOW_DOWN_STEP)
                continue
            if error == "access_denied":
                raise SignInError("the sign-in was denied in the browser")
            if error == "expired_token":
                raise SignInError("the code expired before it was approved; sign in again")
            raise SignInError(f"the sign-in failed: {error}: {description}")

    async def who(self, access_token: str) -> tuple[str, str]:
        """The signed-in person's (email, name) from the userinfo endpoint (falling back to /api/me)."""
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        urls = [await self.endpoint("userinfo_endpoint", "/userinfo"), f"{self.issuer}/api/me"]
        for url in urls:
            try:
                response = await self.http.get(url, headers=headers)
            except httpx.HTTPError as exc:
                raise SignInError(f"cannot reach {self.issuer}: {exc}") from None
            if response.status_code != 200:
                continue
            try:
                body = response.json()
            except ValueError:
                continue
            if isinstance(body, dict) and isinstance(body.get("email"), str):
                name = body.get("name")
                return body["email"], name if isinstance(name, str) and name else body["email"]
        raise SignInError("signed in, but the server did not say who you are")

    async def session_of(self, tokens: dict[str, Any], scope: str = SCOPE) -> StoredSession:
        access = tokens.get("access_token")
        refresh = tokens.get("refresh_token")
        if not isinstance(access, str) or not isinstance(refresh, str) or not access or not refresh:
            raise SignInError("the server's token answer has no access or refresh token")
        email, name = await self.who(access)
        return StoredSession(
            issuer=self.issuer,
            refresh_token=refresh,
            access_token=access,
            expires_at=int(self.wall_clock()) + int(tokens.get("expires_in") or 0),
            email=email,
            name=name,
            client_id=self.client_id,
            scope=str(tokens["scope"]) if isinstance(tokens.get("scope"), str) else scope,
        )

    async def sign_in(
        self, show: Callable[[DeviceAuthorization], object], scope: str = SCOPE
    ) -> StoredSession:
        """The whole flow: start, ``show`` the code and URL to the person, wait, read who it is."""
        authorization = await self.start(scope)
        shown = show(authorization)
        if asyncio.iscoroutine(shown):
            await shown
        return await self.session_of(await self.wait(authorization), scope)

    async def refresh(self, session: StoredSession, store: SessionFile | None = None) -> StoredSession:
        """A new access token (and, rotated, a new refresh token, stored at once). A refused refresh
        deletes the stored session and raises SignInRequired."""
        url = await self.endpoint("token_endpoint", "/token")
        form = {
            "grant_type": "refresh_token",
            "refresh_token": session.refresh_token,
            "client_id": session.client_id,
        }
        response = await self._post(url, form)
        if response.status_code != 200:
            error, description = _oauth_error(response)
            if response.status_code in (400, 401) and error in (
                "invalid_grant",
                "invalid_client",
                "unauthorized_client",
            ):
                if store is not None:
                    store.delete()
                raise SignInRequired(
                    f"your sign-in has ended ({description}); sign in again with `grantd login`"
                )
            raise SignInError(f"refreshing the sign-in failed: {error}: {description}")
        tokens = response.json()
        access = tokens.get("access_token")
        if not isinstance(access, str) or not access:
            raise SignInError("the server's refresh answer has no access token")
        new_refresh = tokens.get("refresh_token")
        renewed = StoredSession(
            issuer=session.issuer,
            refresh_token=new_refresh
            if isinstance(new_refresh, str) and new_refresh
            else session.refresh_token,
            access_token=access,
            expires_at=int(self.wall_clock()) + int(tokens.get("expires_in") or 0),
            email=session.email,
            name=session.name,
            client_id=session.client_id,
            scope=session.scope,
        )
        if store is not None:
            store.save(renewed)
        return renewed

    async def renew(
        self, session: StoredSession, store: SessionFile, *, stale: str | None = None
    ) -> StoredSession:
        """``refresh`` under the session file's lock. If another process rotated the stored session
        meanwhile, its result is used (refreshed again only if its access token is stale too)."""
        async with store.locked():
            stored = store.load()
            if (
                stored is not None
                and stored.issuer == session.issuer
                and stored.refresh_token != session.refresh_token
            ):
                if stored.fresh(self.wall_clock()) and stored.access_token != stale:
                    return stored
                session = stored
            return await self.refresh(session, store)

    async def revoke(self, session: StoredSession) -> bool:
        """Revoke the refresh token (its whole family) at the issuer (RFC 7009); True if the server said 200."""
        url = await self.endpoint("revocation_endpoint", "/revoke")
        form = {
            "token": session.refresh_token,
            "token_type_hint": "refresh_token",
            "client_id": session.client_id,
        }
        response = await self._post(url, form)
        return response.status_code == 200


async def current_session(
    signin: DeviceSignIn, store: SessionFile, *, wall_clock: Callable[[], float] = time.time
) -> StoredSession:
    """The stored session of ``signin``'s issuer with a fresh access token (refreshed if need be)."""
    session = store.load()
    if session is None or session.issuer.rstrip("/") != signin.issuer:
        raise SignInRequired("not signed in; run `grantd login`")
    if session.fresh(wall_clock()):
        return session
    return await signin.renew(session, store)


class SessionCredential(Credential):
    """A person's access token for the TUI's HTTP client, refreshed before it expires and once on a
    401. Refreshes are serialised, within the process (a lock) and across processes (the session
    file's lock): one refresh token is never presented twice (that would revoke the whole family)."""

    def __init__(
        self,
        signin: DeviceSignIn,
        store: SessionFile,
        session: StoredSession | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
        scope: str = SCOPE,
    ):
        self.scope = scope  # what a sign-in from the console asks for (ADMIN_SCOPE with `grantd tui --admin`)
        self.signin = signin
        self.store = store
        self.session = session
        self.wall_clock = wall_clock
        self._lock: asyncio.Lock | None = None
        self.ended: str | None = None  # why the server refused the refresh: no more attempts

    @property
    def session(self) -> StoredSession | None:
        return self._session

    @session.setter
    def session(self, session: StoredSession | None) -> None:
        # `label` stays the plain attribute Credential declares, set with the session it names.
        self._session = session
        self.label = session.label if session is not None else "not signed in"

    def use(self, session: StoredSession) -> None:
        self.session = session
        self.ended = None

    async def _fresh_token(self, stale: str | None = None) -> str:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            session = self.session
            if session is None:
                raise SignInRequired("not signed in")
            if session.fresh(self.wall_clock()) and session.access_token != stale:
                return session.access_token
            if self.ended is not None:
                raise SignInRequired(self.ended)
            try:
                self.session = await self.signin.renew(session, self.store, stale=stale)
            except SignInRequired as exc:
                self.ended = str(exc)  # the stored session is gone; every request now answers 401
                raise
            return self.session.access_token

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        try:
            token = await self._fresh_token()
        except SignInError:  # refused or unreachable: the request goes out as it is and is answered 401
            token = self.session.access_token if self.session is not None else ""
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            try:
                token = await self._fresh_token(stale=token)
            except SignInError:
                return
            request.headers["Authorization"] = f"Bearer {token}"
            yield request

    def __repr__(self) -> str:
        return f"SessionCredential({self.label!r})"


# -- `grantd login` / `grantd logout` -----------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = subparsers.add_parser(
        "login",
        help="sign a person in on this terminal (device code shown here, approved in a browser)",
        description=(
            "Sign in with the device authorization grant: the code and the URL to approve it are printed on "
            "stderr; once approved in a browser, the session (a refresh token) is stored 0600 and the signed-in "
            "person is printed on stdout as JSON. `grantd tui` uses that session."
        ),
    )
    _common(login)
    login.add_argument("--force", action="store_true", help="sign in again even if a session is stored")
    login.add_argument(
        "--admin",
        action="store_true",
        help="ask for administrator rights (the `admin` scope): the browser page says so, and only an "
        "administrator's approval gives them; without it the session acts as you but cannot "
        "administer people, agents or keys",
    )
    login.set_defaults(func=cmd_login)
    logout = subparsers.add_parser("logout", help="revoke and delete the stored terminal sign-in")
    _common(logout)
    logout.set_defaults(func=cmd_logout)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help=f"the server (issuer) URL (default: [server] issuer from the config, "
        f"${ISSUER_ENV}, or the stored session's)",
    )
    parser.add_argument(
        "--config",
        "-c",
        help=f"config file to read the issuer from (default: ${CONFIG_ENV} or "
        f"./{DEFAULT_CONFIG_NAME} if present)",
    )
    parser.add_argument(
        "--session-file",
        type=Path,
        help=f"where the session is stored (default: ${SESSION_ENV} or ~/.config/grantd/session.json)",
    )


def issuer_of(args: argparse.Namespace, store: SessionFile) -> str:
    """--url, else the config's issuer (--config, $GRANTD_CONFIG or ./grantd.toml), else
    $GRANTD_ISSUER, else the stored session's issuer (the same order as `grantd tui`)."""
    if getattr(args, "url", None):
        return str(args.url).rstrip("/")
    config_path = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    if config_path or Path(DEFAULT_CONFIG_NAME).exists():
        from grantd.config import load_for_client as load

        return str(load(Path(config_path or DEFAULT_CONFIG_NAME)).server.issuer).rstrip("/")
    if os.environ.get(ISSUER_ENV):
        return os.environ[ISSUER_ENV].rstrip("/")
    stored = store.load()
    if stored is not None:
        return stored.issuer.rstrip("/")
    raise SignInError(f"no server: give --url, ${ISSUER_ENV} or a config")


def _show(authorization: DeviceAuthorization) -> None:
    uri, code = escape_text(authorization.verification_uri), escape_text(authorization.user_code)
    print(f"To sign in, open {uri} and enter the code {code}", file=sys.stderr)
    print(f"(or open {escape_text(authorization.verification_uri_complete)})", file=sys.stderr)
    print(
        f"Waiting for approval (the code expires in {authorization.expires_in // 60} min)…",
        file=sys.stderr,
        flush=True,
    )


def _person(session: StoredSession) -> str:
    return json.dumps({"issuer": session.issuer, "email": session.email, "name": session.name})


async def login(
    issuer: str,
    store: SessionFile,
    *,
    force: bool = False,
    admin: bool = False,
    show: Callable[[DeviceAuthorization], object] = _show,
) -> tuple[StoredSession, bool]:
    """The stored session if it still works (unless ``force``, or ``admin`` and the stored one did
    not ask for administrator rights), else a new sign-in; (session, new?)."""
    async with DeviceSignIn(issuer) as signin:
        if not force:
            try:
                session = await current_session(signin, store)
                if session.asked_admin or not admin:
                    return session, False
            except SignInRequired:
                pass
        session = await signin.sign_in(show, ADMIN_SCOPE if admin else SCOPE)
        store.save(session)
        return session, True


async def logout(issuer: str | None, store: SessionFile) -> tuple[bool, bool]:
    """(revoked at the server, a stored session was deleted)."""
    session = store.load()
    if session is None:
        return False, False
    revoked = False
    try:
        async with DeviceSignIn(issuer or session.issuer) as signin:
            revoked = await signin.revoke(session)
    except SignInError:
        revoked = False
    return revoked, store.delete()


def cmd_login(args: argparse.Namespace) -> int:
    store = SessionFile(args.session_file)
    try:
        issuer = issuer_of(args, store)
        session, new = asyncio.run(login(issuer, store, force=args.force, admin=args.admin))
    except SignInError as exc:
        print(f"grantd: {exc}", file=sys.stderr)
        return 1
    print(("Signed in as " if new else "Already signed in as ") + escape_text(session.label), file=sys.stderr)
    print(_person(session))
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    store = SessionFile(args.session_file)
    session = store.load()
    if session is None:
        print("grantd: not signed in", file=sys.stderr)
        return 0
    revoked, _ = asyncio.run(logout(args.url, store))
    print(
        "Signed out" + ("" if revoked else " (the server could not be told; the session file is deleted)"),
        file=sys.stderr,
    )
    return 0
