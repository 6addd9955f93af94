-- Devices' registrations, observation tokens and lifecycle events, each device in one step (registrations.py
-- put_registrations): the observations' records are written before the tokens that name them (here, first, when
-- they are on this server: one Redis; in a cluster they are in their tokens' slots, written before by the caller);
-- those of the tokens ended after, and the events' entries in their account's index after, by the caller.
-- KEYS: per device its registration, its token set and its lifecycle events (device_log.py); then the observation
-- records written here. ARGV[1], msgpack (issue 30 #5: one argument for the client to pack): {the most events a
-- device keeps, {per device: {the record ('' to leave it), 1 when the Register is fresh (its earlier tokens end)
-- else 0, {each event's score and record, ...}, {tokens to add}}, ...}, {each observation record}}.
-- Returns per device the tokens ended.
local a = cmsgpack.unpack(ARGV[1])
local most, devices, observations = a[1], a[2], a[3]
local first = 3 * #devices
for i, record in ipairs(observations) do
  redis.call('SET', KEYS[first + i], record)
end
local replies = {}
for d, device in ipairs(devices) do
  local reg, tokens, log = KEYS[3 * d - 2], KEYS[3 * d - 1], KEYS[3 * d]
  local record, fresh, events, added = device[1], device[2], device[3], device[4]
  local ended = {}
  if fresh == 1 then
    ended = redis.call('SMEMBERS', tokens)
    if #ended > 0 then
      redis.call('DEL', tokens)
    end
  end
  if record ~= '' then
    redis.call('SET', reg, record)
  end
  if #events > 0 then
    redis.call('ZADD', log, unpack(events))
    redis.call('ZREMRANGEBYRANK', log, 0, -(most + 1))
  end
  if #added > 0 then
    redis.call('SADD', tokens, unpack(added))
  end
  replies[d] = ended
end
return replies
