-- 3: key generation, requester ids, agent paging, retired keys without private keys
-- D11: an identity token carries the agent's key generation; grants name their requester by a
-- stable id (the agent_id of an agent, else the person's e-mail) that survives re-enrolment.
ALTER TABLE agents ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 1;
CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC);
CREATE INDEX agents_owner ON agents (owner);
CREATE INDEX agents_approver ON agents (approver);
ALTER TABLE grants ADD COLUMN requester_id TEXT;
UPDATE grants SET requester_id = coalesce(
    (SELECT agent_id FROM agents WHERE agents.email = grants.requester), requester);
CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC);
DROP INDEX grants_reuse;
CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status);
-- D12: a retired key only verifies; its private half is deleted.
UPDATE signing_keys SET private_pem = '' WHERE retired_at IS NOT NULL;
