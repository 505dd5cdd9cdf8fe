-- 11: the abuse-limit counters are an UNLOGGED table
-- Issue 27: every counted request (D12) wrote a WAL record and, with synchronous_commit on, waited
-- for its flush: a durable write for a number that only lives for its window (60 s). UNLOGGED
-- keeps every statement of the table exactly as it was: the counters are still one shared table
-- that every process and node updates with the same atomic upsert, so every attempt is counted
-- once and a limit is exact while PostgreSQL runs. What it gives up: after a crash of PostgreSQL
-- (not a clean restart) the table comes back empty, and a streaming replica holds no rows, so
-- after a crash or a failover each counter starts again from 0 once: the same as a window that
-- just began, which the limits accept every minute anyway.
ALTER TABLE rate_counters SET UNLOGGED;
