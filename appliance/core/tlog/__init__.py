"""The tamper-evident decision log (D14, beyond.md §4, issue 23): the pure core, not wired yet.

- ``merkle``: RFC 6962/9162 hashing, tree heads, inclusion and consistency proofs computed from stored
  complete-subtree hashes, their verification, and ``CompactRange`` (the sequencer's append step);
- ``leaves``: the canonical leaf encoding (RFC 8785) and one function per event kind;
- ``note``: C2SP signed notes and tlog-checkpoints (Ed25519), vkeys, and ``sign_checkpoint``, which
  never signs a checkpoint inconsistent with the previous one;
- ``receipts``: the hosts' ``grantd-receipt+jwt`` receipts;
- ``sequencer``: one integration step (the rows to write) and the next checkpoint, checked first;
- ``verify``: the logic of ``grantd audit verify`` (exit 0/2/3, the first bad index);
- ``export``: the export directory.

No I/O but ``export.write_export``/``load_export``; no clock. docs/audit.md says what is built.
"""
