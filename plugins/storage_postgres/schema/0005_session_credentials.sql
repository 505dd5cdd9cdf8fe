-- 5: the passkey that started each session
-- Issue 19: a session records the passkey that started it; deleting the passkey ends it.
ALTER TABLE sessions ADD COLUMN credential_id TEXT COLLATE "C";
CREATE INDEX sessions_credential ON sessions (credential_id);
