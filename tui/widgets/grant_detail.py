"""The detail pane: everything an approver needs to decide one grant, every agent-supplied string escaped."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from grantd.core.display import describe_argv, escape_text, quote_arg
from grantd.tui.format import age, code_points, duration, one_line, timestamp
from grantd.tui.models import AgentInfo, Grant, Reviewers

LABEL_WIDTH = 12


class GrantDetail(VerticalScroll):
    """Shows one grant; `show_context` adds the agent's owner/approver and its earlier grants."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id, can_focus=True)
        self.grant: Grant | None = None
        self.agent: AgentInfo | None = None
        self.agent_error: str | None = None
        self.earlier: list[Grant] | None = None
        self.earlier_error: str | None = None
        self.reviewers: Reviewers | None = None
        self.reviewers_error: str | None = None
        self.now_ms = 0
        self.status_styles: dict[str, str] = {}
        self.border_title = "Details"

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static(Text("No grant selected.", style="dim"), id="detail-body")

    def show(self, grant: Grant | None, now_ms: int) -> None:
        same = grant is not None and self.grant is not None and grant.id == self.grant.id
        if not same:
            self.agent = None
            self.agent_error = None
            self.earlier = None
            self.earlier_error = None
            self.reviewers = None
            self.reviewers_error = None
        self.grant = grant
        self.now_ms = now_ms
        self._redraw()

    def show_context(
        self,
        grant_id: str,
        agent: AgentInfo | None,
        agent_error: str | None,
        earlier: list[Grant],
        earlier_error: str | None,
        reviewers: Reviewers | None = None,
        reviewers_error: str | None = None,
    ) -> None:
        if self.grant is None or self.grant.id != grant_id:
            return
        self.agent, self.agent_error = agent, agent_error
        self.earlier, self.earlier_error = earlier, earlier_error
        self.reviewers, self.reviewers_error = reviewers, reviewers_error
        self._redraw()

    def show_reviewers(self, grant_id: str, reviewers: Reviewers | None, error: str | None) -> None:
        if self.grant is None or self.grant.id != grant_id:
            return
        self.reviewers, self.reviewers_error = reviewers, error
        self._redraw()

    def _redraw(self) -> None:
        self.query_one("#detail-body", Static).update(self.render_text())

    def render_text(self) -> Text:
        grant = self.grant
        if grant is None:
            return Text("No grant selected.", style="dim")
        text = Text(no_wrap=False, end="")

        def line(label: str, *parts: tuple[str, str] | str) -> None:
            text.append(f"{label:<{LABEL_WIDTH}}", style="bold")
            for part in parts:
                if isinstance(part, tuple):
                    text.append(*part)
                else:
                    text.append(part)
            text.append("\n")

        def points(value: str | None, indent: str = " " * LABEL_WIDTH) -> None:
            """Under a value with non-ASCII characters (a look-alike, an escaped blank): their code points."""
            listed = code_points(value)
            if listed:
                text.append(f"{indent}! non-ASCII: {listed}\n", style="bold")

        request = grant.request
        line(
            "Status",
            (grant.status, self.status_styles.get(grant.status, "bold")),
            f"   {request.grant_type}",
            f" {duration(request.duration)}" if request.duration else "",
            f"   id {escape_text(grant.id)}",
        )
        line("Requester", one_line(grant.requester))
        points(grant.requester)
        if self.agent is not None:
            if self.agent.name:
                line("", f"agent {one_line(self.agent.name)}")
                points(self.agent.name)
            line(
                "",
                f"owner {one_line(self.agent.owner) or '-'}   approver {one_line(self.agent.approver) or '-'}",
            )
            points(f"{self.agent.owner or ''}{self.agent.approver or ''}")
            if self.agent.status and self.agent.status != "active":
                line("", (f"agent status {one_line(self.agent.status)}", "bold"))
        elif self.agent_error:
            line("", (f"agent: {one_line(self.agent_error)}", "italic"))
        else:
            line("", ("owner/approver: loading…", "dim"))
        if request.command is not None:
            count = len(request.command)
            run_as = one_line(request.run_as) or "root (default)"  # the words the approval page uses
            line("Command", f"{count} argument{'s' if count != 1 else ''}, run as {run_as}")
            points(request.run_as)
            for arg, arg_line in zip(request.command, describe_argv(request.command), strict=True):
                text.append("  " + arg_line + "\n")
                points(arg, indent="      ")
            line("cmd_hash", one_line(request.cmd_hash) or "-")
        else:
            perms = request.permissions or ()
            line("Permissions", f"{len(perms)}")
            for perm in perms:
                text.append("  " + quote_arg(perm) + "\n")
                points(perm, indent="      ")
            if request.run_as:
                line("Run as", one_line(request.run_as))
                points(request.run_as)
        line("Target host", one_line(request.target_host))
        points(request.target_host)
        line("Audience", one_line(request.audience))
        points(request.audience)
        line("Reason", one_line(request.reason) or "-")
        points(request.reason)
        if request.binding_message:  # D16: quoted and escaped, labelled as the agent's words
            line("Message", f"from the agent: “{one_line(request.binding_message)}”")
            points(request.binding_message)
        line("Requested", f"{timestamp(grant.created_at)} ({age(self.now_ms, grant.created_at)} ago)")
        if grant.decided_at or grant.decided_by:
            line("Decided", f"{timestamp(grant.decided_at)} by {one_line(grant.decided_by) or '-'}")
        if grant.decision_reason:
            line("Why", one_line(grant.decision_reason))
        if grant.expires_at:
            line("Expires", timestamp(grant.expires_at))
        if grant.used_at:
            line("Used", timestamp(grant.used_at))
        if grant.delegation_id:
            line("Delegation", one_line(grant.delegation_id))
        self._review_lines(grant, text, line)
        text.append("\n")
        what = "command" if request.command is not None else "permissions"
        if self.earlier is None and self.earlier_error is None:
            text.append(f"Earlier grants for this agent and {what}: loading…\n", style="dim")
        elif self.earlier_error:
            text.append(f"Earlier grants: {one_line(self.earlier_error)}\n", style="italic")
        else:
            earlier = self.earlier or []
            text.append(f"Earlier grants for this agent and {what}: {len(earlier) or 'none'}\n", style="bold")
            for old in earlier[:10]:
                text.append(f"  {age(self.now_ms, old.created_at):>4} ago  ")
                text.append(f"{old.status:<8}", style=self.status_styles.get(old.status, ""))
                text.append(f"  {old.request.grant_type:<6}  by {one_line(old.decided_by) or '-'}\n")
            if len(earlier) > 10:
                text.append(f"  … and {len(earlier) - 10} more\n", style="dim")
        text.rstrip()
        return text

    def _review_lines(self, grant: Grant, text: Text, line: Callable[..., None]) -> None:
        """A grant under an approval policy (D13): each requirement's count, the votes that count
        (who, when, via), and for a pending one who may still approve (from /reviewers)."""
        review = grant.review
        if review is None:
            return
        line("Policy", ", ".join(one_line(p) for p in review.policy_ids))
        for requirement in review.requirements:
            got = len(requirement.approvals)
            style = "bold green" if got >= requirement.approve else "bold"
            line(
                "Requires",
                (f"{got} of {requirement.approve}", style),
                f" approvals for {one_line(requirement.id)}",
                f", {len(requirement.denials)} of {requirement.deny} denials" if requirement.denials else "",
            )
            for email in requirement.denials:
                text.append(f"  denied by {one_line(email)}\n", style="bold")
        for vote in review.approvals:
            line(
                "Approved",
                f"by {one_line(vote.sub)}",
                f"  {timestamp(vote.at)}" if vote.at else "",
                f"  via {one_line(vote.via)}" if vote.via else "",
            )
        if not grant.is_pending:
            return
        if self.reviewers_error:
            line("May approve", (f"unknown: {one_line(self.reviewers_error)}", "italic"))
        elif self.reviewers is None:
            line("May approve", ("loading…", "dim"))
        else:
            for requirement in self.reviewers.requirements:
                who = ", ".join(one_line(e) for e in requirement.eligible) or "nobody"
                missing = f" ({requirement.missing} missing)" if requirement.missing else ""
                line("May approve", f"{one_line(requirement.id)}{missing}: {who}")
