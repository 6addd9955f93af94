-- A device's registration, observation tokens and lifecycle events in one step, in its slot (registrations.py
-- put_registrations): the observations' records, in their tokens' slots, are written before; those of the tokens
-- ended after, and the events' entries in their account's index (another slot) in the same round trip as those.
-- KEYS[1] the registration, KEYS[2] its token set, KEYS[3] its lifecycle events (device_log.py). ARGV[1] the record
-- ('' to leave it), ARGV[2] '1' when the Register is fresh (its earlier tokens end), ARGV[3] the number k of events,
-- ARGV[4] the most events a device keeps, ARGV[5 .. 4+2k] each event's score and record, ARGV[5+2k ..] tokens to
-- add. Returns the tokens ended.
local ended = {}
if ARGV[2] == '1' then
  ended = redis.call('SMEMBERS', KEYS[2])
  redis.call('DEL', KEYS[2])
end
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1])
end
local k = tonumber(ARGV[3])
for i = 0, k - 1 do
  redis.call('ZADD', KEYS[3], ARGV[5 + 2 * i], ARGV[6 + 2 * i])
end
if k > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[4]) + 1))
end
for i = 5 + 2 * k, #ARGV do
  redis.call('SADD', KEYS[2], ARGV[i])
end
return ended
