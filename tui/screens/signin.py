"""The sign-in screen: the device authorization grant's code and URL, until a person approves it in
a browser; then the console continues as that person (``GrantConsole.signed_in``)."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Center, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from grantd.tui.format import one_line
from grantd.tui.signin import DeviceAuthorization, SessionCredential, SignInError


class SignInScreen(Screen[None]):
    DEFAULT_CSS = """
    SignInScreen { align: center middle; }
    #signin-box { width: 76; max-width: 100%; height: auto; border: round $primary; padding: 1 2; }
    #signin-code { text-style: bold; color: $text-accent; padding: 1 0; }
    #signin-state { color: $text-muted; }
    #signin-state.-error { color: $text-error; }
    """
    BINDINGS = [Binding("r", "retry", "Retry"), Binding("q", "app.quit", "Quit")]

    def __init__(self, credential: SessionCredential) -> None:
        super().__init__()
        self.credential = credential
        self.authorization: DeviceAuthorization | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="signin-box") as box:
            box.border_title = "Sign in to grantd"
            yield Static(
                Text(f"Server {one_line(self.credential.signin.issuer)}", end=""), id="signin-server"
            )
            yield Static("Asking the server for a code…", id="signin-url")
            with Center():
                yield Static("", id="signin-code")
            yield Static("", id="signin-state")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.run_sign_in()

    def _show(self, authorization: DeviceAuthorization) -> None:
        self.authorization = authorization
        url = Text(end="")
        url.append("Open ")
        url.append(one_line(authorization.verification_uri), style="bold underline")
        url.append(" in a browser where you are signed in, and enter this code:")
        self.query_one("#signin-url", Static).update(url)
        self.query_one("#signin-code", Static).update(Text(one_line(authorization.user_code), end=""))
        direct = one_line(authorization.verification_uri_complete)
        self._state(
            f"Or open {direct}\nWaiting for approval (the code expires in {authorization.expires_in // 60} min)…"
        )

    def _state(self, text: str, *, error: bool = False) -> None:
        state = self.query_one("#signin-state", Static)
        state.update(Text(text, end=""))
        state.set_class(error, "-error")

    @work(exclusive=True, group="signin", exit_on_error=False)
    async def run_sign_in(self) -> None:
        self.error = None
        try:
            session = await self.credential.signin.sign_in(self._show, self.credential.scope)
            self.credential.store.save(session)
        except (SignInError, OSError) as exc:
            self.error = str(exc)
            self._state(f"{exc}\nPress r to try again, q to quit.", error=True)
            self.refresh_bindings()
            return
        self.credential.use(session)
        self.app.call_later(self.app.signed_in)  # type: ignore[attr-defined]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.error is not None if action == "retry" else True  # retry is offered only after a failure

    def action_retry(self) -> None:
        if self.error is not None:
            self.error = None
            self.refresh_bindings()
            self.query_one("#signin-code", Static).update("")
            self._state("Asking the server for a new code…")
            self.run_sign_in()
