-- Read what a batch of registrations replaces (redis.py put_registered_devices, put_registrations) in one round
-- trip, on the connection that WATCHes these keys: immediate commands there would cost one round trip a key.
-- KEYS[1..ARGV[1]] strings (device records), the others sets (subscriber sets, observation-token sets).
-- Returns, in KEYS order, each record (nil when absent), then each set's members.
local records = tonumber(ARGV[1])
local found = {}
for i, key in ipairs(KEYS) do
  if i <= records then
    found[i] = redis.call('GET', key)  -- false when absent: kept in the table, answered as nil
  else
    found[i] = redis.call('SMEMBERS', key)
  end
end
return found
