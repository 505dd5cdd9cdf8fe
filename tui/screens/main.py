"""The main screen: the live grant list, the detail pane, and every decision key."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from grantd.tui.client import ApiError, GrantSource
from grantd.tui.feed import BACKOFF, GrantFeed
from grantd.tui.format import action_summary, one_line
from grantd.tui.messages import (
    ConnectionChanged,
    ConnectionState,
    DetailLoaded,
    GrantChanged,
    GrantsLoaded,
    ReviewersLoaded,
)
from grantd.tui.models import DECIDED_STATUSES, STATUSES, AgentInfo, Grant, Reviewers
from grantd.tui.screens.confirm import ConfirmScreen
from grantd.tui.screens.deny import DenyScreen
from grantd.tui.screens.help import HelpScreen
from grantd.tui.screens.override import Override, OverrideScreen
from grantd.tui.widgets.connection_status import ConnectionStatus
from grantd.tui.widgets.filter_bar import FilterBar
from grantd.tui.widgets.grant_detail import GrantDetail
from grantd.tui.widgets.grant_table import SORTABLE, GrantTable

STATUS_FILTERS = ("pending", "decided", "all", *DECIDED_STATUSES)
NEW_MARK_MS = 60_000  # how long a newly arrived grant keeps its "●"
HISTORY_LIMIT = 500


class MainScreen(Screen[None]):
    ESCAPE_TO_MINIMIZE = False  # escape is action_restore: minimize *and* give the list its focus back
    # The footer shows what fits in 80 columns, `? Help` and `q Quit` included; refresh, status
    # filter and sort keys are in the help screen (`?`) and docs/tui.md.
    BINDINGS = [
        Binding("a", "approve", "Approve"),
        Binding("o,A", "override", "Approve…"),
        Binding("d", "deny", "Deny"),
        Binding("r", "revoke", "Revoke"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("h", "toggle_history", "History"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "app.quit", "Quit"),
        Binding("R,f5", "reload", "Refresh", show=False),
        Binding("f", "cycle_status", "Status", show=False),
        Binding("s", "next_sort", "Sort", show=False),
        Binding("S", "reverse_sort", "Reverse sort", show=False),
        Binding("escape", "restore", "Back", show=False),
    ]

    def __init__(
        self,
        source: GrantSource,
        *,
        clock: Callable[[], int],
        bell: bool = False,
        poll_interval: float = 5.0,
        backoff: tuple[float, ...] = BACKOFF,
        confirm_root: bool = False,
    ) -> None:
        super().__init__()
        self.source = source
        self.clock = clock
        self.ring_bell = bell
        self.confirm_root = (
            confirm_root  # `grantd tui --confirm-root`: ask before approving a command as root
        )
        self.grants: dict[str, Grant] = {}
        self.first_seen: dict[str, int] = {}
        self.new_ids: set[str] = set()
        self.settled: set[str] = set()  # decided while listed as pending: kept visible until a refresh
        self.status_filter = "pending"
        self.text_filter = ""
        self.initial_loaded = False
        self.agents: dict[str, AgentInfo] = {}
        self.connection = ConnectionState("connecting")
        self.feed = GrantFeed(
            source,
            on_grant=self._on_feed_grant,
            on_state=self._post_state,
            reload=self.reload,
            poll_interval=poll_interval,
            backoff=backoff,
        )

    def _post_state(self, state: ConnectionState) -> None:
        self.post_message(ConnectionChanged(state))

    # -- layout ----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="topbar"):
            title = Text(end="", no_wrap=True, overflow="ellipsis")
            title.append("grantd", style="bold")
            title.append(f" {one_line(self.source.base_url)} · {one_line(self.source.credential.label)}")
            yield Static(title, id="server-label")
            yield ConnectionStatus(id="connection")
        yield FilterBar(id="filter-bar")
        with Vertical(id="panes"):
            yield GrantTable(id="grants")
            yield GrantDetail(id="detail")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        styles = self._status_styles()
        self.query_one(GrantTable).status_styles = styles
        self.query_one(GrantDetail).status_styles = styles
        self.query_one(GrantTable).focus()
        self._update_summary()
        self.set_interval(5.0, self._tick)
        self.run_feed()

    def _status_styles(self) -> dict[str, str]:
        # Theme colours meant for text on this theme's background: readable in light and dark themes.
        variables = self.app.get_css_variables()
        warning, success, error = (variables.get(f"text-{n}", "") for n in ("warning", "success", "error"))
        return {
            "pending": f"bold {warning}".strip(),
            "approved": f"bold {success}".strip(),
            "denied": f"bold {error}".strip(),
            "revoked": error,
            "consumed": "dim",
            "expired": "dim",
        }

    # -- the feed ----------------------------------------------------------------------------------
    @work(exclusive=True, group="feed", exit_on_error=False)
    async def run_feed(self) -> None:
        await self.feed.run()

    async def reload(self) -> None:
        """Fetch the lists the current filter needs (called by the feed on connect and when polling)."""
        pending = await self.source.list_grants(status="pending")
        self.post_message(GrantsLoaded("pending", pending))
        if self.status_filter != "pending":
            self.post_message(GrantsLoaded("history", await self.source.list_grants(max_items=HISTORY_LIMIT)))

    async def _on_feed_grant(self, event_name: str, grant: Grant) -> None:
        self.post_message(GrantChanged(grant, "event"))

    @work(exclusive=True, group="reload", exit_on_error=False)
    async def reload_now(self) -> None:
        try:
            await self.reload()
        except (ApiError, httpx.HTTPError) as exc:
            self.notify(f"Refresh failed: {_describe(exc)}", severity="error", markup=False)

    @work(group="reread", exit_on_error=False)
    async def reread(self, grant_id: str) -> None:
        try:
            grant = await self.source.get_grant(grant_id)
        except (ApiError, httpx.HTTPError):
            return  # the next reload (on reconnect or R) tries again
        self.post_message(GrantChanged(grant, "refresh"))

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self.connection = message.state
        self.query_one(ConnectionStatus).state = message.state

    def on_grants_loaded(self, message: GrantsLoaded) -> None:
        announce = self.initial_loaded
        listed = {g.id for g in message.grants}
        for grant in message.grants:
            self._merge(grant, announce=announce)
        if message.view == "pending":
            self.initial_loaded = True
            # Pending here but not in the server's pending list: decided while we were not listening.
            for grant_id, grant in list(self.grants.items()):
                if grant.is_pending and grant_id not in listed:
                    self.reread(grant_id)
        self._refresh_view()

    def on_grant_changed(self, message: GrantChanged) -> None:
        self._merge(message.grant, announce=self.initial_loaded)
        self._refresh_view()

    def _merge(self, grant: Grant, *, announce: bool) -> None:
        old = self.grants.get(grant.id)
        if old is not None and not grant.supersedes(old):
            return
        if old is not None:
            grant = grant.keeping_review(old)
        if old is None:
            self.first_seen[grant.id] = self.clock()
            if announce and grant.is_pending:
                self.new_ids.add(grant.id)
                if self.ring_bell:
                    self.app.bell()
        elif old.is_pending and not grant.is_pending:
            self.settled.add(grant.id)
        if not grant.is_pending:
            self.new_ids.discard(grant.id)
        self.grants[grant.id] = grant

    # -- the view ----------------------------------------------------------------------------------
    def matches(self, grant: Grant) -> bool:
        return self.in_status_view(grant) and self.matches_text(grant)

    def in_status_view(self, grant: Grant) -> bool:
        wanted = self.status_filter
        if wanted == "pending":
            return grant.is_pending or grant.id in self.settled
        if wanted == "decided":
            return not grant.is_pending
        if wanted == "all":
            return True
        return grant.status == wanted

    def matches_text(self, grant: Grant) -> bool:
        needle = self.text_filter.strip().lower()
        if not needle:
            return True
        haystack = " ".join(
            (
                grant.id,
                grant.status,
                grant.requester,
                grant.request.target_host,
                grant.request.audience,
                grant.request.grant_type,
                action_summary(grant),
                grant.request.reason or "",
                grant.request.run_as or "",
                grant.decided_by or "",
            )
        ).lower()
        return all(word in haystack for word in needle.split())

    def visible_grants(self) -> list[Grant]:
        return [g for g in self.grants.values() if self.matches(g)]

    def _refresh_view(self) -> None:
        table = self.query_one(GrantTable)
        table.sync(self.visible_grants(), self.clock(), self.new_ids)
        self._update_summary()
        self._show_selected()

    def _update_summary(self) -> None:
        table = self.query_one(GrantTable)
        sort_label = next(c.label for c in SORTABLE if c.key == table.sort_column)
        arrow = "↑" if table.sort_reverse else "↓"
        self.query_one(FilterBar).show_summary(self.status_filter, self.counts(), f"{sort_label}{arrow}")

    def counts(self) -> str:
        """What the rows are, in words: the pending view counts grants still waiting and, apart,
        those decided while shown; a text filter says how many of them match."""
        in_view = [g for g in self.grants.values() if self.in_status_view(g)]
        if self.status_filter == "pending":
            waiting = sum(1 for g in in_view if g.is_pending)
            words = f"{waiting} waiting"
            if len(in_view) > waiting:
                words += f" · {len(in_view) - waiting} just decided"
        else:
            words = f"{len(in_view)} grant{'' if len(in_view) == 1 else 's'}"
        if self.text_filter.strip():
            shown = sum(1 for g in in_view if self.matches_text(g))
            words += f" · {shown} match"
        return words

    def _tick(self) -> None:
        now = self.clock()
        self.new_ids = {gid for gid in self.new_ids if now - self.first_seen.get(gid, now) < NEW_MARK_MS}
        self.query_one(GrantTable).refresh_cells(now, self.new_ids)
        detail = self.query_one(GrantDetail)
        if detail.grant is not None:
            detail.show(self.grants.get(detail.grant.id, detail.grant), now)

    def selected(self) -> Grant | None:
        grant_id = self.query_one(GrantTable).selected_id
        return self.grants.get(grant_id) if grant_id else None

    def _show_selected(self) -> None:
        detail = self.query_one(GrantDetail)
        grant = self.selected()
        previous = detail.grant.id if detail.grant is not None else None
        detail.show(grant, self.clock())
        if grant is not None and grant.id != previous:
            self.load_context(grant)

    @on(DataTable.RowHighlighted, "#grants")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_selected()

    @on(DataTable.RowSelected, "#grants")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        detail = self.query_one(GrantDetail)
        self.maximize(detail)
        detail.focus()

    @work(exclusive=True, group="detail", exit_on_error=False)
    async def load_context(self, grant: Grant) -> None:
        agent = self.agents.get(grant.requester)
        agent_error = None
        if agent is None:
            try:
                agent = await self.source.agent(grant.requester)
                self.agents[grant.requester] = agent
            except ApiError as exc:
                agent_error = {403: "not visible with this credential", 404: "not an enrolled agent"}.get(
                    exc.status, _describe(exc)
                )
            except httpx.HTTPError as exc:
                agent_error = _describe(exc)
        earlier: list[Grant] = []
        earlier_error = None
        try:
            same = await self.source.list_grants(requester=grant.requester, max_items=HISTORY_LIMIT)
            earlier = sorted(
                (
                    g
                    for g in same
                    if g.id != grant.id
                    and g.action_key == grant.action_key
                    and g.created_at <= grant.created_at
                ),
                key=lambda g: -g.created_at,
            )
        except (ApiError, httpx.HTTPError) as exc:
            earlier_error = _describe(exc)
        reviewers, reviewers_error = await self._reviewers_of(grant)
        self.post_message(
            DetailLoaded(grant.id, agent, agent_error, earlier, earlier_error, reviewers, reviewers_error)
        )

    async def _reviewers_of(self, grant: Grant) -> tuple[Reviewers | None, str | None]:
        """Who may still approve a pending grant under a policy (D13); nothing to ask otherwise."""
        if grant.review is None or not grant.is_pending:
            return None, None
        try:
            return await self.source.reviewers(grant.id), None
        except (ApiError, httpx.HTTPError) as exc:
            return None, _describe(exc)

    @work(exclusive=True, group="reviewers", exit_on_error=False)
    async def reload_reviewers(self, grant: Grant) -> None:
        """After a vote that left the grant pending: its votes and who may still approve, anew."""
        try:
            latest = await self.source.get_grant(grant.id)
        except (ApiError, httpx.HTTPError):
            return
        self.post_message(GrantChanged(latest, "refresh"))
        reviewers, reviewers_error = await self._reviewers_of(latest)
        self.post_message(ReviewersLoaded(latest.id, reviewers, reviewers_error))

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        self.query_one(GrantDetail).show_context(
            message.grant_id,
            message.agent,
            message.agent_error,
            message.earlier,
            message.earlier_error,
            message.reviewers,
            message.reviewers_error,
        )

    def on_reviewers_loaded(self, message: ReviewersLoaded) -> None:
        self.query_one(GrantDetail).show_reviewers(
            message.grant_id, message.reviewers, message.reviewers_error
        )

    # -- decisions ---------------------------------------------------------------------------------
    def shown_grant(self) -> Grant | None:
        """The grant the approver is looking at: the one in the detail pane, which is also the
        highlighted row. Decisions act on it and only on it (never on whatever row is now under the cursor)."""
        detail = self.query_one(GrantDetail).grant
        if detail is None or detail.id != self.query_one(GrantTable).selected_id:
            self._show_selected()  # they disagree only between a list change and its redraw: show, do not act
            return None
        return self.grants.get(detail.id, detail)

    def _guarded(self, grant: Grant, verb: str, act: Callable[[], None]) -> None:
        """Act at once, unless the list moved under the cursor since the approver last moved it (a
        new grant arrived above, the highlighted one was decided elsewhere, …): then ask first,
        naming the grant, so a key pressed while looking at another row cannot decide this one."""
        table = self.query_one(GrantTable)
        if not table.shifted:
            act()
            return
        question = Text(end="")
        question.append("The list changed under the cursor.\n", style="bold")
        question.append(f"{verb.capitalize()} the grant of ")
        question.append(one_line(grant.requester), style="bold")
        question.append(
            f"?\n{action_summary(grant)}\non {one_line(grant.request.target_host)} · {grant.request.grant_type}"
        )
        question.append(f" · id {one_line(grant.id)}", style="dim")

        def chosen(yes: bool | None) -> None:
            table.shifted = False
            if yes and self.grants.get(grant.id, grant).is_pending:
                act()

        self.app.push_screen(ConfirmScreen(f"{verb.capitalize()} this grant?", question), chosen)

    def _pending_selection(self, verb: str) -> Grant | None:
        if self.query_one(GrantTable).selected_id is None:
            self.notify(f"Nothing selected to {verb}.", severity="warning")
            return None
        grant = self.shown_grant()
        if grant is None:
            self.notify("The list just changed; look again and press the key once more.", severity="warning")
            return None
        if not grant.is_pending:
            self.notify(
                f"Only pending grants can be {verb}d; this one is {one_line(grant.status)}.",
                severity="warning",
                markup=False,
            )
            return None
        return grant

    def _as_root(self, grant: Grant, act: Callable[[], object]) -> None:
        """With --confirm-root, approving a command that runs as root (run_as unset or "root") asks
        first, naming the grant; otherwise it acts at once."""
        if not (self.confirm_root and grant.runs_as_root):
            act()
            return
        question = Text(end="")
        question.append("This command runs as root.\n", style="bold")
        question.append("Approve the grant of ")
        question.append(one_line(grant.requester), style="bold")
        question.append(
            f"?\n{action_summary(grant)}\non {one_line(grant.request.target_host)} · {grant.request.grant_type}"
        )
        question.append(f" · id {one_line(grant.id)}", style="dim")

        def chosen(yes: bool | None) -> None:
            if yes and self.grants.get(grant.id, grant).is_pending:
                act()

        self.app.push_screen(ConfirmScreen("Approve as root?", question), chosen)

    def action_approve(self) -> None:
        grant = self._pending_selection("approve")
        if grant is not None:
            self._guarded(
                grant, "approve", lambda: self._as_root(grant, lambda: self.decide(grant, "approve"))
            )

    def action_override(self) -> None:
        grant = self._pending_selection("approve")
        if grant is None:
            return

        def chosen(override: Override | None) -> None:
            if override is not None:
                self._as_root(grant, lambda: self.decide(grant, "approve", override=override))

        # The form names the grant (requester, command, host) before anything is approved.
        self.app.push_screen(OverrideScreen(grant), chosen)

    def action_deny(self) -> None:
        grant = self._pending_selection("denie")
        if grant is None:
            return

        def chosen(reason: str | None) -> None:
            if reason is not None:
                self.decide(grant, "deny", reason=reason or None)

        # The reason form names the grant before anything is denied.
        self.app.push_screen(DenyScreen(grant), chosen)

    def action_revoke(self) -> None:
        if self.query_one(GrantTable).selected_id is None:
            self.notify("Nothing selected to revoke.", severity="warning")
            return
        grant = self.shown_grant()
        if grant is None:
            self.notify("The list just changed; look again and press the key once more.", severity="warning")
            return
        if grant.status != "approved":
            self.notify(
                f"Only approved grants can be revoked; this one is {one_line(grant.status)}.",
                severity="warning",
                markup=False,
            )
            return
        question = Text(end="")
        question.append("Revoke the approved grant of ")
        question.append(one_line(grant.requester), style="bold")
        question.append(f"?\n{action_summary(grant)}\nThe agent can no longer use it.")

        def chosen(yes: bool | None) -> None:
            if yes:
                self.decide(grant, "revoke")

        self.app.push_screen(ConfirmScreen("Revoke grant", question), chosen)

    # Decisions are not exclusive: approving one grant must never cancel a decision still in flight.
    @work(group="decide", exit_on_error=False)
    async def decide(
        self, grant: Grant, action: str, *, override: Override | None = None, reason: str | None = None
    ) -> None:
        who = one_line(grant.requester)
        try:
            if action == "approve":
                decision = await self.source.approve(
                    grant.id,
                    grant_type=override.grant_type if override else None,
                    duration=override.duration if override else None,
                )
            elif action == "deny":
                decision = await self.source.deny(grant.id, reason=reason)
            else:
                decision = await self.source.revoke(grant.id)
        except ApiError as exc:
            if exc.status == 400:
                text = f"Not {action}d: {exc.detail} (someone else decided it). The row shows what the server has."
            elif exc.status in (401, 403):
                text = f"Not {action}d: not authorised ({exc.detail})."
            else:
                text = f"Not {action}d: {exc.status} {exc.detail}."
            self.notify(text, severity="error", timeout=8, markup=False)
            self.reread(grant.id)
            return
        except httpx.HTTPError as exc:
            self.notify(
                f"{action.capitalize()} of {who}'s grant may not have reached the server ({_describe(exc)}).",
                severity="error",
                timeout=8,
                markup=False,
            )
            self.reread(grant.id)
            return
        updated = grant.with_decision(decision.partial)
        self.post_message(GrantChanged(updated, "decision"))
        if updated.is_pending and action != "revoke":  # a vote that did not decide: a policy wants more (D13)
            self.notify(
                f"Your vote on {who}'s grant is recorded; it waits for more approvals.",
                timeout=6,
                markup=False,
            )
            self.reload_reviewers(updated)
            return
        past = {"approve": "Approved", "deny": "Denied", "revoke": "Revoked"}[action]
        detail = f" as {override.grant_type}" if override else ""
        self.notify(f"{past} {who}'s grant{detail}.", timeout=4, markup=False)

    # -- viewing -------------------------------------------------------------------------------------
    def action_reload(self) -> None:
        self.settled.clear()
        self.grants = {gid: g for gid, g in self.grants.items() if g.is_pending}
        self._refresh_view()
        self.reload_now()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    @on(FilterBar.Changed)
    def _filter_changed(self, message: FilterBar.Changed) -> None:
        self.text_filter = message.text
        self._refresh_view()

    @on(FilterBar.Done)
    def _filter_done(self, message: FilterBar.Done) -> None:
        self.query_one(GrantTable).focus()

    def set_status_filter(self, value: str) -> None:
        needs_history = value != "pending" and self.status_filter == "pending"
        self.status_filter = value
        self._refresh_view()
        if needs_history:
            self.reload_now()

    def action_cycle_status(self) -> None:
        index = STATUS_FILTERS.index(self.status_filter)
        self.set_status_filter(STATUS_FILTERS[(index + 1) % len(STATUS_FILTERS)])

    def action_toggle_history(self) -> None:
        self.set_status_filter("decided" if self.status_filter == "pending" else "pending")

    def action_next_sort(self) -> None:
        table = self.query_one(GrantTable)
        keys = [c.key for c in SORTABLE]
        table.sort_by(keys[(keys.index(table.sort_column) + 1) % len(keys)], table.sort_reverse)
        self._update_summary()

    def action_reverse_sort(self) -> None:
        table = self.query_one(GrantTable)
        table.sort_by(table.sort_column, not table.sort_reverse)
        self._update_summary()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_restore(self) -> None:
        if self.maximized is not None:
            self.minimize()
            self.query_one(GrantTable).focus()
        elif self.focused is not self.query_one(GrantTable):
            self.query_one(GrantTable).focus()
        elif self.text_filter:
            self.query_one(FilterBar).clear()  # escape on the list also drops a filter kept with enter


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status} {exc.detail}"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect to the server"
    if isinstance(exc, httpx.TimeoutException):
        return "the server did not answer in time"
    return type(exc).__name__


__all__ = ["STATUSES", "STATUS_FILTERS", "MainScreen"]
