-- 7: device codes remember the client address that asked
-- D12: the /device page says where a device sign-in came from.
ALTER TABLE device_codes ADD COLUMN client_address TEXT;
