-- 6: owners and approvers bound to person ids; pending grants per requester
-- Issue 19 (D11): existing rows are bound to the persons their e-mails name today; e-mails
-- that name no person stay unbound until that person is created.
ALTER TABLE agents ADD COLUMN owner_id TEXT COLLATE "C";
ALTER TABLE agents ADD COLUMN approver_id TEXT COLLATE "C";
UPDATE agents SET owner_id = (SELECT person_id FROM people WHERE people.email = lower(agents.owner));
UPDATE agents SET approver_id = (SELECT person_id FROM people WHERE people.email = lower(agents.approver));
-- An e-mail that names no person now but redeemed a registration URL once was a person
-- deleted before this migration: a tombstone id (nobody's), and their delegations end.
UPDATE agents SET owner_id = 'usr_deleted:' || owner WHERE owner_id IS NULL AND (NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower(agents.owner))
    AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower(agents.owner))
    AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower(agents.owner) AND r.used_at IS NOT NULL));
UPDATE agents SET approver_id = 'usr_deleted:' || approver
    WHERE approver_id IS NULL AND (NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower(agents.approver))
    AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower(agents.approver))
    AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower(agents.approver) AND r.used_at IS NOT NULL));
UPDATE delegations SET status = 'revoked', revoked_by = 'grantd migration 6',
        revoked_at = (extract(epoch from clock_timestamp()) * 1000)::bigint
    WHERE status = 'active' AND ((NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower(delegations.delegator))
    AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower(delegations.delegator))
    AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower(delegations.delegator) AND r.used_at IS NOT NULL))
                                 OR (NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower(delegations.delegate))
    AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower(delegations.delegate))
    AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower(delegations.delegate) AND r.used_at IS NOT NULL)));
CREATE INDEX agents_owner_id ON agents (owner_id);
CREATE INDEX agents_approver_id ON agents (approver_id);
CREATE INDEX grants_pending_requester ON grants (requester_id) WHERE status = 'pending';
