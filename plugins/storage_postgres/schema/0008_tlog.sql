-- 8: decision log
-- D14 / issue 23: the Merkle log's leaves and complete-subtree nodes, its state and sequencer
-- lease (one row), signed checkpoints, the log keys (not JWT keys), the events of the log that are
-- not grant events, enrolled hosts and their receipts (grantd.store.tlog).
CREATE TABLE tlog_leaves (
        idx BIGINT PRIMARY KEY,
        leaf BYTEA NOT NULL,
        leaf_hash BYTEA NOT NULL,
        grant_id TEXT COLLATE "C"
);
CREATE INDEX tlog_leaves_grant ON tlog_leaves (grant_id, idx);
CREATE TABLE tlog_nodes (
        level INTEGER NOT NULL,
        idx BIGINT NOT NULL,
        hash BYTEA NOT NULL,
        PRIMARY KEY (level, idx)
);
CREATE TABLE tlog_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        size BIGINT NOT NULL,
        grant_seq BIGINT NOT NULL,
        event_seq BIGINT NOT NULL,
        holder TEXT COLLATE "C",
        lease_until BIGINT NOT NULL
);
INSERT INTO tlog_state (id, size, grant_seq, event_seq, holder, lease_until) VALUES (1, 0, 0, 0, NULL, 0);
CREATE TABLE tlog_checkpoints (
        size BIGINT PRIMARY KEY,
        note TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL
);
CREATE TABLE tlog_keys (
        kid TEXT COLLATE "C" PRIMARY KEY,
        name TEXT COLLATE "C" NOT NULL,
        seed TEXT COLLATE "C" NOT NULL,
        public TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL,
        retired_at BIGINT,
        seq BIGSERIAL NOT NULL
);
CREATE TABLE audit_events (
        seq BIGSERIAL PRIMARY KEY,
        kind TEXT COLLATE "C" NOT NULL,
        grant_id TEXT COLLATE "C",
        actor TEXT COLLATE "C" NOT NULL,
        data TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL
);
CREATE TABLE hosts (
        host TEXT COLLATE "C" PRIMARY KEY,
        public_key TEXT COLLATE "C" NOT NULL,
        enrolled_by TEXT COLLATE "C" NOT NULL,
        created_at BIGINT NOT NULL
);
CREATE TABLE receipts (
        key TEXT COLLATE "C" PRIMARY KEY,
        created_at BIGINT NOT NULL
);
