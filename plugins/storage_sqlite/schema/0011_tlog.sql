-- 11: decision log
-- D14 / issue 23: the Merkle log's leaves and complete-subtree nodes, its state and sequencer
-- lease (one row), signed checkpoints, the log keys (not JWT keys), the events of the log that are
-- not grant events, enrolled hosts and their receipts (grantd.store.tlog).
CREATE TABLE tlog_leaves (
        idx INTEGER PRIMARY KEY,
        leaf BLOB NOT NULL,
        leaf_hash BLOB NOT NULL,
        grant_id TEXT
);
CREATE INDEX tlog_leaves_grant ON tlog_leaves (grant_id, idx);
CREATE TABLE tlog_nodes (
        level INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        hash BLOB NOT NULL,
        PRIMARY KEY (level, idx)
) WITHOUT ROWID;
CREATE TABLE tlog_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        size INTEGER NOT NULL,
        grant_seq INTEGER NOT NULL,
        event_seq INTEGER NOT NULL,
        holder TEXT,
        lease_until INTEGER NOT NULL
);
INSERT INTO tlog_state (id, size, grant_seq, event_seq, holder, lease_until) VALUES (1, 0, 0, 0, NULL, 0);
CREATE TABLE tlog_checkpoints (
        size INTEGER PRIMARY KEY,
        note TEXT NOT NULL,
        created_at INTEGER NOT NULL
);
CREATE TABLE tlog_keys (
        kid TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        seed TEXT NOT NULL,
        public TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        retired_at INTEGER
);
CREATE TABLE audit_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        grant_id TEXT,
        actor TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at INTEGER NOT NULL
);
CREATE TABLE hosts (
        host TEXT PRIMARY KEY,
        public_key TEXT NOT NULL,
        enrolled_by TEXT NOT NULL,
        created_at INTEGER NOT NULL
);
CREATE TABLE receipts (
        key TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL
);
