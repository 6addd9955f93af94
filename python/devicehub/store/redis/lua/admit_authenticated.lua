-- The device id of an endpoint that proved a credential of an account (Store.admit_authenticated, issue 28 #1), in
-- one round trip: refused (false) when the name is enrolled into another account; a name enrolled nowhere is
-- enrolled here first; then the name's id in the account is the claim, as in claim_device_id.lua.
-- KEYS[1] the name's enrolment key, KEYS[2] the name's ids per account (both in the name's slot). ARGV[1] the
-- account id, ARGV[2] the id for a name that has none. Returns the device id, or false.
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
  return false
end
if not owner then
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[2], ARGV[1])
