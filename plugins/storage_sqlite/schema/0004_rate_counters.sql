-- 4: rate counters
-- D12: abuse-limit counters shared by every process; one row per (key, fixed window). The
-- index on the window's end lets each hit drop ended windows with an index range.
CREATE TABLE rate_counters (
        key TEXT NOT NULL,
        window_start INTEGER NOT NULL,
        count INTEGER NOT NULL,
        ends_at INTEGER NOT NULL,
        PRIMARY KEY (key, window_start)
) WITHOUT ROWID;
CREATE INDEX rate_counters_ends ON rate_counters (ends_at);
