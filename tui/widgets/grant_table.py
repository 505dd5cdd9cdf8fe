"""The grant list: a DataTable whose rows are keyed by grant id and updated in place."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from grantd.tui.format import action_summary, age, has_non_ascii, one_line
from grantd.tui.models import Grant


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None
    sort_key: Callable[[Grant], object]


# Who, where and the type come before the command, so a narrow terminal cuts the command (whose
# every argument the detail pane lists), never the target host (issue 20 item 9). Reason and audience,
# also in the detail pane, come last and show when there is room.
COLUMNS: tuple[Column, ...] = (
    Column("new", " ", 2, lambda g: 0),
    Column("age", "Age", 4, lambda g: -g.created_at),
    Column("status", "Status", 8, lambda g: g.status),
    Column("requester", "Requester", 22, lambda g: g.requester.lower()),
    Column("host", "Target host", 14, lambda g: g.request.target_host.lower()),
    Column("type", "Type", 6, lambda g: g.request.grant_type),
    Column("action", "Command / permissions", 28, lambda g: action_summary(g).lower()),
    Column("reason", "Reason", 16, lambda g: (g.request.reason or "").lower()),
    Column("audience", "Audience", 12, lambda g: g.request.audience.lower()),
)
SORTABLE = tuple(c for c in COLUMNS if c.key != "new")
COLUMN_BY_KEY = {c.key: c for c in COLUMNS}
FIXED = ("new", "age", "status", "type")
# (least, most) width of the columns sized to their content: the target host is shrunk last.
# The least is never below the header's own length ("Target host" was cut to "Target hos").
REQUESTER = (12, 26)
HOST = (len("Target host"), 24)
ACTION_MIN = 16
REASON = (12, 40)  # shown when the command keeps REASON_FROM columns
REASON_FROM = 40
AUDIENCE_FROM = 60  # and the audience when it keeps this many


def column_widths(available: int, padding: int, needed: dict[str, int] | None = None) -> dict[str, int]:
    """The width of every column for a table ``available`` cells wide (``padding`` on each side of a
    cell), given the longest text of some columns (``needed``): the fixed ones as they are, the target
    host as wide as its longest name and the requester as wide as theirs (within bounds; when the
    command would get fewer than ACTION_MIN cells the requester shrinks first, then the host), then
    reason and audience when the command keeps enough room, and the command everything that is left.
    Columns that do not fit keep a small width after the command (the table scrolls sideways to them)."""
    needed = needed or {}
    widths = {key: COLUMN_BY_KEY[key].width or 0 for key in FIXED}
    visible = (*FIXED, "requester", "host", "action")
    room = available - sum(widths.values()) - 2 * padding * len(visible)
    host = max(HOST[0], min(HOST[1], needed.get("host", HOST[1])))
    requester = max(REQUESTER[0], min(REQUESTER[1], needed.get("requester", REQUESTER[1])))
    requester = max(REQUESTER[0], min(requester, room - host - ACTION_MIN))
    host = max(HOST[0], min(host, room - requester - ACTION_MIN))
    widths.update(
        requester=requester, host=host, reason=REASON[0], audience=COLUMN_BY_KEY["audience"].width or 0
    )
    left = room - requester - host
    reason = max(REASON[0], min(REASON[1], needed.get("reason", REASON[1])))
    if left - reason - 2 * padding >= REASON_FROM:
        widths["reason"] = reason
        left -= reason + 2 * padding
        if left - widths["audience"] - 2 * padding >= AUDIENCE_FROM:
            left -= widths["audience"] + 2 * padding
    widths["action"] = max(ACTION_MIN, left)
    return widths


class _MarkerCell(Text):
    """The first cell of a row ("●" for new); knows its grant id so sorting can order rows by Grant."""

    grant_id: str


def _marker(grant_id: str, is_new: bool, non_ascii: bool) -> Text:
    """ "●" for new, then "!" when any of the grant's text holds non-ASCII characters (a look-alike
    letter, an escaped blank): the detail pane lists their code points."""
    cell = _MarkerCell("●" if is_new else " ", style="bold", no_wrap=True, end="")
    cell.append("!" if non_ascii else " ", style="bold reverse" if non_ascii else "")
    cell.grant_id = grant_id
    return cell


def _cell(value: str, style: str = "") -> Text:
    # Always Text, never str: DataTable parses str cells as markup, and this text comes from agents.
    return Text(value, style=style, no_wrap=True, overflow="ellipsis", end="")


class GrantTable(DataTable[Text]):
    """Rows keyed by grant id, so updates and re-sorts keep the approver's selection."""

    DEFAULT_CSS = """
    GrantTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.sort_column = "age"
        self.sort_reverse = False
        self.status_styles: dict[str, str] = {}
        self._grants: dict[str, Grant] = {}
        self._new: set[str] = set()
        # True when rows were added/removed/re-sorted under the cursor since the approver last moved
        # it: the highlighted grant kept its id but not its place on the screen (or another grant took
        # the cursor). A decision key then asks first, naming the grant (MainScreen._guarded).
        self.shifted = False
        self._syncing = False

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column.label, key=column.key, width=column.width)

    def on_resize(self) -> None:
        self.fit_columns()

    def fit_columns(self) -> None:
        """Fit the columns to the terminal and the rows (column_widths): the target host is not cut
        while there is room for it, and the command takes the room a wide terminal has."""
        changed = False
        needed = {
            "requester": max((len(one_line(g.requester)) for g in self._grants.values()), default=0),
            "host": max((len(one_line(g.request.target_host)) for g in self._grants.values()), default=0),
            "reason": max((len(one_line(g.request.reason)) for g in self._grants.values()), default=0),
        }
        for key, width in column_widths(
            self.scrollable_content_region.width, self.cell_padding, needed
        ).items():
            column = self.columns.get(ColumnKey(key))
            if column is not None and column.width != width:
                column.width = width
                changed = True
        if changed:
            # DataTable has no public "set column width"; these two make it re-measure.
            self._clear_caches()
            self._require_update_dimensions = True
            self.refresh()

    # -- content ---------------------------------------------------------------------------------
    def _cells(self, grant: Grant, now_ms: int) -> dict[str, Text]:
        is_new = grant.id in self._new
        emphasis = "bold" if is_new else ""
        dim = "" if grant.is_pending else "dim"
        return {
            "new": _marker(grant.id, is_new, has_non_ascii(grant)),
            "age": _cell(age(now_ms, grant.created_at), dim),
            # A pending grant under a policy (D13) shows how far it is: "pend 1/2".
            "status": _cell(
                f"pend {grant.quorum}" if grant.quorum else grant.status,
                self.status_styles.get(grant.status, ""),
            ),
            "requester": _cell(one_line(grant.requester), f"{emphasis} {dim}".strip()),
            "action": _cell(action_summary(grant), dim),
            "host": _cell(one_line(grant.request.target_host), dim),
            "audience": _cell(one_line(grant.request.audience), dim),
            "type": _cell(grant.request.grant_type, dim),
            "reason": _cell(one_line(grant.request.reason), dim),
        }

    def sync(self, grants: Iterable[Grant], now_ms: int, new_ids: set[str]) -> None:
        """Show exactly `grants`: update rows in place, add and remove by key, re-sort, keep the cursor."""
        wanted = {g.id: g for g in grants}
        selected = self.selected_id
        before = self.cursor_row if selected is not None else None
        self._syncing = True
        try:
            self._sync(wanted, now_ms, new_ids, selected)
        finally:
            self._syncing = False
        if selected is not None and (self.selected_id != selected or self.cursor_row != before):
            self.shifted = (
                True  # the same grant moved to another row, or another grant is now under the cursor
            )

    def _sync(self, wanted: dict[str, Grant], now_ms: int, new_ids: set[str], selected: str | None) -> None:
        self._new = set(new_ids)
        for grant_id in [key for key in self._grants if key not in wanted]:
            self.remove_row(grant_id)
            del self._grants[grant_id]
        for grant in wanted.values():
            cells = self._cells(grant, now_ms)
            if grant.id in self._grants:
                old = self._grants[grant.id]
                if old != grant or old.quorum != grant.quorum or grant.id in new_ids:  # votes change only raw
                    for key, value in cells.items():
                        self.update_cell(grant.id, key, value)
            else:
                self.add_row(*(cells[c.key] for c in COLUMNS), key=grant.id)
            self._grants[grant.id] = grant
        self._resort(selected)
        self.fit_columns()

    def refresh_cells(self, now_ms: int, new_ids: set[str]) -> None:
        """Ages tick and "new" marks clear without touching anything else."""
        old_new, self._new = self._new, set(new_ids)
        for grant_id, grant in self._grants.items():
            self.update_cell(grant_id, "age", self._cells(grant, now_ms)["age"])
            if (grant_id in old_new) != (grant_id in self._new):
                for key, value in self._cells(grant, now_ms).items():
                    self.update_cell(grant_id, key, value)

    def _resort(self, keep: str | None) -> None:
        column = COLUMN_BY_KEY[self.sort_column]
        grants = self._grants
        ordered = sorted(
            grants.values(), key=lambda g: (column.sort_key(g), -g.created_at), reverse=self.sort_reverse
        )
        rank = {grant.id: index for index, grant in enumerate(ordered)}
        # DataTable.sort hands the key function cell values only; the marker cell carries its row's id.
        self.sort("new", key=lambda cell: rank.get(getattr(cell, "grant_id", ""), 0))
        if keep is not None and keep in grants:
            self.move_cursor(row=self.get_row_index(keep), scroll=True)

    def sort_by(self, column_key: str, reverse: bool) -> None:
        self.sort_column = column_key
        self.sort_reverse = reverse
        self._syncing = True
        try:
            self._resort(self.selected_id)
        finally:
            self._syncing = False

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        super().watch_cursor_coordinate(old, new)
        if not self._syncing:
            self.shifted = False  # the approver moved the cursor: what is highlighted is what they chose

    # -- selection -------------------------------------------------------------------------------
    @property
    def selected_id(self) -> str | None:
        if self.row_count == 0 or not self.is_valid_row_index(self.cursor_row):
            return None
        row_key, _ = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0))
        return str(row_key.value) if row_key.value is not None else None

    def shown(self, grant_id: str) -> Grant | None:
        """The grant as its row currently shows it (None when it has no row)."""
        return self._grants.get(grant_id)

    def select(self, grant_id: str) -> bool:
        if grant_id not in self._grants:
            return False
        self.move_cursor(row=self.get_row_index(grant_id), scroll=True)
        return True

    def grant_ids_in_order(self) -> list[str]:
        return [
            str(self.coordinate_to_cell_key(Coordinate(row, 0))[0].value) for row in range(self.row_count)
        ]
