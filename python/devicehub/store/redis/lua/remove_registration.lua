-- Remove a registration and its observation tokens, only if it was not updated meanwhile (issue 12 #5): of several
-- nodes expiring one registration, exactly one removes it and announces the expiry. The observations' records and
-- the expiry entry are in other slots: the caller deletes them after (registrations.py).
-- KEYS[1] registration blob, KEYS[2] the device's observation-token set (the device's slot).
-- ARGV[1] expected updated_at (repr) or "" for any. Returns the tokens ended, or nil when nothing was removed.
local blob = redis.call('GET', KEYS[1])
if not blob then
  return nil
end
if ARGV[1] ~= '' then
  local record = cmsgpack.unpack(blob)
  if record['updated_at'] ~= tonumber(ARGV[1]) then
    return nil
  end
end
local tokens = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return tokens
