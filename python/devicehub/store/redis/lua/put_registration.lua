-- A device's registration and observation tokens in one step, in its slot (registrations.py put_registrations):
-- the observations' records, in their tokens' slots, are written before; those of the tokens ended after.
-- KEYS[1] the registration, KEYS[2] its token set. ARGV[1] the record ('' to leave it), ARGV[2] '1' when the
-- Register is fresh (its earlier tokens end), ARGV[3..] tokens to add. Returns the tokens ended.
local ended = {}
if ARGV[2] == '1' then
  ended = redis.call('SMEMBERS', KEYS[2])
  redis.call('DEL', KEYS[2])
end
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1])
end
for i = 3, #ARGV do
  redis.call('SADD', KEYS[2], ARGV[i])
end
return ended
