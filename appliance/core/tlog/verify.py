"""The logic of ``grantd audit verify`` as a library: (checkpoint, vkeys, saved state, leaves) → exit code.

Order (D14): the checkpoint's signature, its consistency with the checkpoint saved from the last run,
the root recomputed from the leaves, then the semantics. Exit codes: ``OK`` 0 all holds; ``CRYPTO`` 2
a cryptographic mismatch (a bad signature, a log that shrank or forked against the saved state, a
leaf that is not what the log signed: the first bad index is named); ``SEMANTIC`` 3 the log is intact
but says something that must not happen (a `once` grant consumed twice, an approval without the votes
its pinned policy needs, a receipt not signed by an enrolled host or for a grant never approved).

The saved state is ``{"origin", "size", "root"}`` (root base64), what ``VerifyResult.state`` gives
back after a clean run; keep it somewhere the server cannot write.

Naming the first bad index needs a reference for the leaves' original hashes; the signed root
authenticates one wholesale: the leaf hashes the log stored (``claimed_leaf_hashes``, e.g. the
export's ``leaf_hash`` column) are trusted only if they fold to the signed root, and complete
subtree hashes (``nodes``, e.g. tiles) only along a path each checked against its parent. Without
either, the result names the first index after the largest earlier checkpoint the leaves still match.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grantd.core.review.evaluate import review_from_dict
from grantd.core.review.votes import TIMEOUT_REASON, timeout_at
from grantd.core.tlog.export import Export
from grantd.core.tlog.leaves import Leaf, LeafError, parse_leaf
from grantd.core.tlog.merkle import (
    CompactRange,
    MemoryTree,
    NodeReader,
    ProofError,
    leaf_hash,
    node_hash,
    range_nodes,
    verify_consistency,
)
from grantd.core.tlog.note import Checkpoint, NoteError, Verifier, open_checkpoint
from grantd.core.tlog.receipts import BadReceipt, verify_receipt

OK, CRYPTO, SEMANTIC = 0, 2, 3


@dataclass(frozen=True)
class VerifyResult:
    code: int
    reason: str
    bad_index: int | None = None
    checkpoint: Checkpoint | None = None
    exact: bool = True  # False: bad_index is the first index not yet matched by a trusted checkpoint

    @property
    def state(self) -> dict[str, Any] | None:
        """The state to save after a clean run (None otherwise: keep the old one)."""
        if self.code != OK or self.checkpoint is None:
            return None
        return state_of(self.checkpoint)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "reason": self.reason,
            "bad_index": self.bad_index,
            "exact": self.exact,
            "size": self.checkpoint.size if self.checkpoint else None,
        }


def state_of(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "origin": checkpoint.origin,
        "size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root).decode(),
    }


def checkpoint_of_state(state: Mapping[str, Any]) -> Checkpoint:
    try:
        root = base64.b64decode(state["root"], validate=True)
        size, origin = state["size"], state["origin"]
    except (KeyError, TypeError, binascii.Error, ValueError):
        raise ValueError("the state file is {origin, size, root}") from None
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or len(root) != 32
        or not isinstance(origin, str)
    ):
        raise ValueError("the state file is {origin, size, root}")
    return Checkpoint(origin, size, root)


# -- semantics -------------------------------------------------------------------------------------------


@dataclass
class GrantHistory:
    """What the log has said so far about one grant (handed to the approval hook)."""

    grant_id: str
    created: Leaf | None = None
    votes: list[Leaf] = field(default_factory=list)
    auto: Leaf | None = None
    outcome: str | None = None  # approved | denied
    consumes: int = 0
    uses: int = 0
    ended: str | None = None  # revoked | expired: nothing may use it afterwards

    @property
    def grant_type(self) -> str | None:
        return self.created.data.get("grant_type") if self.created else None


# The pinned-policy check: given a grant's history and its `grant.approved` leaf, a reason the
# approval does not meet its pinned policy, or None. The default checks what the log alone shows.
ApprovalCheck = Callable[[GrantHistory, Leaf], str | None]


def default_approval_check(history: GrantHistory, approved: Leaf) -> str | None:
    """An approval needs a basis: an approve rule's decision, or approve votes. With a pinned review
    (grantd.core.review.Review as a dict in `grant.created`), at least as many distinct approving
    people as its blocks need together (one person fills one block, D13). Group membership is not
    in the log, so which block each voter may fill is a check for a hook that knows the groups."""
    if history.auto is not None and history.auto.data.get("decision") == "approve":
        return None
    approvers = {_voter(v) for v in history.votes if v.data.get("decision") == "approve"}
    if not approvers:
        return "approved without an approve vote or rule"
    review = history.created.data.get("review") if history.created else None
    if review is not None:
        try:
            needed = sum(r.approve for r in review_from_dict(review).requirements)
        except (KeyError, TypeError, ValueError):
            return "its pinned review cannot be read"
        if len(approvers) < needed:
            return f"approved with {len(approvers)} approving people where its policy needs {needed}"
    return None


def _denial_basis(history: GrantHistory, denied: Leaf) -> str | None:
    """A denial needs a basis too: a deny rule's decision, a deny vote, or its pinned policy's
    timeout (``on_timeout = "deny"``: the system denies it once ``pending_ttl`` has passed, D13)."""
    if history.auto is not None and history.auto.data.get("decision") == "deny":
        return None
    if any(v.data.get("decision") == "deny" for v in history.votes):
        return None
    if denied.data.get("reason") == TIMEOUT_REASON and denied.actor.get("kind") == "system":
        review = history.created.data.get("review") if history.created else None
        try:
            pinned = review_from_dict(review) if isinstance(review, dict) else None
        except (KeyError, TypeError, ValueError):
            return "its pinned review cannot be read"
        if pinned is None or pinned.on_timeout != "deny" or pinned.pending_ttl is None:
            return "denied for a timeout its pinned policy does not have"
        assert history.created is not None
        ends = timeout_at(pinned, history.created.ts // 1000)  # the sweep counts whole seconds
        if ends is None or denied.ts // 1000 < ends:
            return "denied for a timeout before its pinned pending_ttl had passed"
        return None
    return "denied without a deny vote or rule"


# The check of a vote's WebAuthn evidence: given the `grant.reviewed` leaf and the
# `person.credential_added` leaf of the credential it names, a reason it does not verify, or None.
EvidenceCheck = Callable[[Leaf, Leaf], str | None]


def _voter(vote: Leaf) -> str:
    actor = vote.actor
    return str(actor.get("pid") or actor.get("email") or actor.get("agent_id") or actor.get("kind")).lower()


class _Semantics:
    def __init__(
        self, approval_check: ApprovalCheck, audience: str | None, evidence_check: EvidenceCheck | None
    ):
        self.approval_check = approval_check
        self.evidence_check = evidence_check
        self.audience = audience
        self.credentials: dict[str, Leaf] = {}  # credential id -> its person.credential_added leaf
        self.grants: dict[str, GrantHistory] = {}
        self.hosts: dict[str, str] = {}  # host -> enrolled key line (the latest)
        self.receipts: set[tuple[str, str, str, str]] = set()
        self.last_seq = -1
        self.live = False  # a leaf not marked backfilled has been seen
        self.loaded: set[str] | None = None  # the policy ids of the newest policy.loaded leaf

    def check(self, leaf: Leaf) -> str | None:
        if leaf.seq <= self.last_seq:
            return f"seq {leaf.seq} does not grow (after {self.last_seq})"
        self.last_seq = leaf.seq
        backfilled = leaf.data.get("backfilled", False)
        if not isinstance(backfilled, bool):
            return "backfilled is true or absent"
        if backfilled and self.live:
            return "a backfilled leaf after the log's first live leaf (backfill is only the log's start)"
        self.live = self.live or not backfilled
        if leaf.kind == "host.enrolled":
            self.hosts[leaf.data["host"]] = leaf.data["public_key"]
            return None
        if leaf.kind == "exec.receipt":
            return self._receipt(leaf)
        if leaf.kind == "person.credential_added":
            if leaf.data["credential_id"] in self.credentials:
                return f"credential {leaf.data['credential_id']} added twice"
            self.credentials[leaf.data["credential_id"]] = leaf
            return None
        if leaf.kind == "policy.loaded":
            ids = leaf.data.get("policy_ids")
            self.loaded = {str(i) for i in ids} if isinstance(ids, list) else None
            return None
        if not leaf.kind.startswith("grant.") or leaf.grant_id is None:
            return None
        if leaf.kind == "grant.created":
            if leaf.grant_id in self.grants:
                return f"grant {leaf.grant_id} created twice"
            self.grants[leaf.grant_id] = GrantHistory(leaf.grant_id, created=leaf)
            return self._pinned_policies_loaded(leaf)
        history = self.grants.get(leaf.grant_id)
        if history is None:
            return f"{leaf.kind} for grant {leaf.grant_id}, which the log never created"
        if leaf.kind == "grant.reviewed":
            if history.outcome is not None or history.ended is not None:
                return f"vote on grant {leaf.grant_id} after it was {history.outcome or history.ended}"
            if _voter(leaf) in {_voter(v) for v in history.votes}:
                return f"{_voter(leaf)} voted twice on grant {leaf.grant_id}"
            problem = self._evidence(leaf)
            if problem:
                return f"vote on grant {leaf.grant_id}: {problem}"
            history.votes.append(leaf)
        elif leaf.kind == "grant.auto_decided":
            history.auto = leaf
        elif leaf.kind in ("grant.approved", "grant.denied"):
            if history.outcome is not None:
                return f"grant {leaf.grant_id} decided twice ({history.outcome}, then {leaf.kind})"
            if history.ended is not None:
                return f"grant {leaf.grant_id} decided after it was {history.ended}"
            if leaf.kind == "grant.approved" and not leaf.data.get("backfilled"):
                problem = self.approval_check(history, leaf)
                if problem:
                    return f"grant {leaf.grant_id}: {problem}"
            if leaf.kind == "grant.denied" and not leaf.data.get("backfilled"):
                problem = _denial_basis(history, leaf)
                if problem:
                    return f"grant {leaf.grant_id}: {problem}"
            history.outcome = leaf.kind.removeprefix("grant.")
        elif leaf.kind in ("grant.revoked", "grant.expired"):
            history.ended = history.ended or leaf.kind.removeprefix("grant.")
        elif leaf.kind in ("grant.consumed", "grant.used"):
            if history.outcome != "approved":
                return f"{leaf.kind} of grant {leaf.grant_id}, which was never approved"
            if history.ended is not None:
                return f"{leaf.kind} of grant {leaf.grant_id} after it was {history.ended}"
            if leaf.kind == "grant.consumed":
                if history.grant_type != "once":
                    return f"grant.consumed of {history.grant_type} grant {leaf.grant_id} (timed/always log grant.used)"
                history.consumes += 1
                if history.consumes > 1:
                    return f"once grant {leaf.grant_id} consumed twice"
            else:
                if history.grant_type == "once":
                    return f"grant.used of once grant {leaf.grant_id} (a once consume is grant.consumed)"
                history.uses += 1
        return None

    def _pinned_policies_loaded(self, created: Leaf) -> str | None:
        """A grant pins policies the server had loaded: the newest ``policy.loaded`` leaf before it
        names each of them (checked once the log has such a leaf; backfilled grants are history)."""
        review = created.data.get("review")
        if self.loaded is None or not isinstance(review, dict) or created.data.get("backfilled"):
            return None
        missing = sorted(str(i) for i in review.get("policy_ids") or [] if str(i) not in self.loaded)
        if missing:
            return f"grant {created.grant_id} pinned policies no policy.loaded leaf announced: {', '.join(missing)}"
        return None

    def _evidence(self, vote: Leaf) -> str | None:
        """A passkey vote names a credential the log added earlier, for the person who voted; the
        assertion itself is checked by ``evidence_check`` (its challenge rule comes with D15's wiring)."""
        evidence = vote.data.get("evidence")
        webauthn = evidence.get("webauthn") if isinstance(evidence, dict) else None
        if webauthn is None:
            return None
        credential_id = webauthn.get("credential_id") if isinstance(webauthn, dict) else None
        credential = self.credentials.get(credential_id) if isinstance(credential_id, str) else None
        if credential is None:
            return "its passkey evidence names a credential no earlier leaf added"
        if str(credential.data["email"]).lower() != str(vote.actor.get("email", "")).lower():
            return "its passkey evidence names another person's credential"
        return self.evidence_check(vote, credential) if self.evidence_check else None

    def _receipt(self, leaf: Leaf) -> str | None:
        host = leaf.data["host"]
        if host not in self.hosts:
            return f"receipt from host {host}, which no earlier leaf enrolled"
        try:
            receipt = verify_receipt(leaf.data["receipt"], self.audience, self.hosts.get)
        except BadReceipt as error:
            return f"receipt from host {host} does not verify: {error}"
        claims = receipt.claims
        if (
            receipt.host != host
            or claims["grant_id"] != leaf.grant_id
            or claims["authz_jti"] != leaf.data["authz_jti"]
            or claims["result"] != leaf.data["result"]
            or claims.get("exit_code") != leaf.data.get("exit_code")
        ):
            return "the receipt leaf's fields differ from the signed receipt"
        if receipt.key in self.receipts:
            return f"receipt {receipt.key} logged twice"
        self.receipts.add(receipt.key)
        if receipt.result == "refused":
            return None  # probing is logged whatever the grant: no approval needed
        history = self.grants.get(leaf.grant_id or "")
        if history is None or history.outcome != "approved":
            return f"receipt of a run for grant {leaf.grant_id}, which was never approved"
        if history.consumes + history.uses == 0:
            return (
                f"receipt of a run for grant {leaf.grant_id} with no grant.consumed or grant.used before it"
            )
        if history.created is not None and history.created.data.get("cmd_hash") not in (
            None,
            claims["cmd_hash"],
        ):
            return f"receipt for grant {leaf.grant_id} ran another command than the grant's"
        return None


def prefix_roots(hashes: Sequence[bytes], sizes: Iterable[int]) -> dict[int, bytes]:
    """The tree heads of the first ``size`` leaves for each size, in one pass and O(log n) memory."""
    wanted = set(sizes)
    compact = CompactRange()
    roots = {0: compact.root()} if 0 in wanted else {}
    last = max(wanted, default=0)
    for digest in hashes[:last]:
        compact.append(digest)
        if compact.size in wanted:
            roots[compact.size] = compact.root()
    return roots


# -- locating the first bad leaf ----------------------------------------------------------------------


def _first_difference(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _bisect(hashes: Sequence[bytes], size: int, root: bytes, nodes: NodeReader) -> int | None:
    """Authenticated descent over untrusted complete-subtree hashes: every node used is first checked
    against its (already trusted) parent, starting from the signed root."""
    mine = MemoryTree(hashes[:size])
    peaks = range_nodes(0, size)
    theirs = nodes(peaks)
    if any(p not in theirs for p in peaks):
        return None
    folded = theirs[peaks[-1]]
    for p in reversed(peaks[:-1]):
        folded = node_hash(theirs[p], folded)
    if folded != root:
        return None
    for level, index in peaks:
        trusted = theirs[(level, index)]
        if mine.nodes[(level, index)] == trusted:
            continue
        while level > 0:
            left, right = (level - 1, 2 * index), (level - 1, 2 * index + 1)
            children = nodes([left, right])
            if (
                left not in children
                or right not in children
                or node_hash(children[left], children[right]) != trusted
            ):
                return None
            if mine.nodes[left] != children[left]:
                level, index, trusted = left[0], left[1], children[left]
            else:
                level, index, trusted = right[0], right[1], children[right]
        return index
    return None


def locate_first_bad(
    hashes: Sequence[bytes],
    size: int,
    root: bytes,
    *,
    claimed_leaf_hashes: Sequence[bytes] | None = None,
    nodes: NodeReader | None = None,
    trusted: Iterable[Checkpoint] = (),
) -> tuple[int, bool]:
    """The first leaf whose hash is not the one the signed root commits to: (index, exact)."""
    if claimed_leaf_hashes is not None and len(claimed_leaf_hashes) >= size:
        claimed = list(claimed_leaf_hashes[:size])
        if prefix_roots(claimed, {size})[size] == root:
            return _first_difference(hashes, claimed), True
    if nodes is not None:
        found = _bisect(hashes, size, root, nodes)
        if found is not None:
            return found, True
    usable = [c for c in trusted if 0 < c.size <= min(size, len(hashes))]
    roots = prefix_roots(hashes, {c.size for c in usable})
    matched = [c.size for c in usable if roots[c.size] == c.root]
    return max(matched, default=0), False


# -- the whole check ------------------------------------------------------------------------------------


def verify_log(
    checkpoint_note: str | bytes,
    vkeys: Iterable[str | Verifier],
    state: Mapping[str, Any] | None,
    leaves: Sequence[bytes],
    *,
    origin: str | None = None,
    consistency_proof: Sequence[bytes] | None = None,
    claimed_leaf_hashes: Sequence[bytes] | None = None,
    nodes: NodeReader | None = None,
    earlier: Iterable[str | bytes] = (),
    audience: str | None = None,
    approval_check: ApprovalCheck = default_approval_check,
    evidence_check: EvidenceCheck | None = None,
) -> VerifyResult:
    """Check a log: ``leaves`` are the raw leaves 0.. (at least the checkpoint's size; more are
    ignored); ``consistency_proof`` from the saved state's size to the checkpoint's (the server's; when
    absent the leaves prove it); ``earlier`` more signed checkpoints (an export's) used to check
    consistency and to narrow down a bad leaf; ``audience`` the issuer URL receipts are for."""
    try:
        verifiers = [v if isinstance(v, Verifier) else Verifier.from_vkey(v) for v in vkeys]
    except NoteError as error:
        return VerifyResult(CRYPTO, f"bad verifier key: {error}")
    if not verifiers:
        return VerifyResult(CRYPTO, "no verifier key given")
    # 1. The signature.
    try:
        checkpoint = open_checkpoint(checkpoint_note, verifiers, origin)
    except NoteError as error:
        return VerifyResult(CRYPTO, f"checkpoint signature: {error}")
    # 2. Consistency with what was seen before (the saved state, earlier signed checkpoints).
    saved: list[Checkpoint] = []
    try:
        if state is not None:
            saved.append(checkpoint_of_state(state))
        saved.extend(open_checkpoint(note, verifiers, checkpoint.origin) for note in earlier)
    except (ValueError, NoteError) as error:
        return VerifyResult(CRYPTO, f"saved state or earlier checkpoint: {error}", checkpoint=checkpoint)
    for old in saved:
        if old.origin != checkpoint.origin:
            return VerifyResult(
                CRYPTO,
                f"the saved checkpoint is of {old.origin!r}, not {checkpoint.origin!r}",
                checkpoint=checkpoint,
            )
        if old.size > checkpoint.size:
            return VerifyResult(
                CRYPTO,
                f"consistency: the log shrank from {old.size} to {checkpoint.size} leaves",
                bad_index=checkpoint.size,
                checkpoint=checkpoint,
            )
    if state is not None and consistency_proof is not None:
        try:
            verify_consistency(
                saved[0].size, checkpoint.size, saved[0].root, checkpoint.root, consistency_proof
            )
        except ProofError as error:
            return VerifyResult(
                CRYPTO, f"consistency with the saved checkpoint: {error}", checkpoint=checkpoint
            )
    # 3. The root recomputed from the leaves.
    if len(leaves) < checkpoint.size:
        return VerifyResult(
            CRYPTO,
            f"only {len(leaves)} leaves for a checkpoint of {checkpoint.size}",
            bad_index=len(leaves),
            checkpoint=checkpoint,
        )
    raw = list(leaves[: checkpoint.size])
    hashes = [leaf_hash(leaf) for leaf in raw]
    roots = prefix_roots(hashes, {old.size for old in saved} | {checkpoint.size})
    if roots[checkpoint.size] != checkpoint.root:
        trusted_before = [old for old in saved if old.size <= checkpoint.size]
        index, exact = locate_first_bad(
            hashes,
            checkpoint.size,
            checkpoint.root,
            claimed_leaf_hashes=claimed_leaf_hashes,
            nodes=nodes,
            trusted=trusted_before,
        )
        what = (
            f"leaf {index} is not the leaf the checkpoint signed"
            if exact
            else f"the leaves do not match the checkpoint's root; the first bad leaf is at index {index} or later"
        )
        return VerifyResult(CRYPTO, what, bad_index=index, checkpoint=checkpoint, exact=exact)
    for old in saved:  # the leaves are now those signed; an earlier checkpoint must be their prefix
        if old.size and roots[old.size] != old.root:
            return VerifyResult(
                CRYPTO,
                f"consistency: the log forked from the checkpoint of size {old.size}",
                checkpoint=checkpoint,
            )
    # 4. The semantics.
    semantics = _Semantics(approval_check, audience, evidence_check)
    for index, data in enumerate(raw):
        try:
            leaf = parse_leaf(data)
        except LeafError as error:
            return VerifyResult(
                SEMANTIC, f"leaf {index} is not a valid leaf: {error}", bad_index=index, checkpoint=checkpoint
            )
        problem = semantics.check(leaf)
        if problem:
            return VerifyResult(SEMANTIC, f"leaf {index}: {problem}", bad_index=index, checkpoint=checkpoint)
    return VerifyResult(OK, f"{checkpoint.size} leaves verified", checkpoint=checkpoint)


def verify_export(
    export: Export,
    vkeys: Iterable[str | Verifier],
    state: Mapping[str, Any] | None,
    *,
    origin: str | None = None,
    audience: str | None = None,
    approval_check: ApprovalCheck = default_approval_check,
    evidence_check: EvidenceCheck | None = None,
) -> VerifyResult:
    """``grantd audit verify --from-export DIR``: the newest checkpoint, checked for consistency with the
    saved state and every earlier checkpoint of the export, against the exported leaves."""
    return verify_log(
        export.checkpoint,
        vkeys,
        state,
        export.leaves,
        origin=origin,
        claimed_leaf_hashes=export.leaf_hashes,
        earlier=[n for n in export.checkpoints if n != export.checkpoint],
        audience=audience,
        approval_check=approval_check,
        evidence_check=evidence_check,
    )
