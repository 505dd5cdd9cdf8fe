-- 4: device codes remember the client address that asked
-- D12: the /device page says where
ALTER TABLE device_codes ADD COLUMN client_address TEXT COLLATE "C";
