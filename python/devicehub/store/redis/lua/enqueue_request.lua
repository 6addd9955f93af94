-- Queue a device request in its device's queue in one step (Store.enqueue_request; the request's blob, in its key's
-- slot, is claimed before: requests.py): refused when the device already has `max_pending` requests waiting (0: no
-- bound).
-- KEYS[1] the device's queue (zset). ARGV[1] the queue member, ARGV[2] max_pending.
-- A write request also gives KEYS[2] the device's snapshot paths (zset), KEYS[3] its desired values (hash), ARGV[3]
-- the resource path and ARGV[4] the desired value: stored with the request, or neither.
-- Returns {0, score} queued (the score: this server's clock in microseconds, past the queue's last), {2, 0} full.
local bound = tonumber(ARGV[2])
if bound > 0 and redis.call('ZCARD', KEYS[1]) >= bound then
  return {2, 0}
end
if #KEYS == 3 then
  -- a script is not rolled back when a command fails: the snapshot's keys are checked before the first write
  local paths, desired = redis.call('TYPE', KEYS[2]).ok, redis.call('TYPE', KEYS[3]).ok
  if (paths ~= 'none' and paths ~= 'zset') or (desired ~= 'none' and desired ~= 'hash') then
    return redis.error_reply('WRONGTYPE the device snapshot is not a snapshot')
  end
end
local now = redis.call('TIME')
local score = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= score then
  score = tonumber(last[2]) + 1
end
redis.call('ZADD', KEYS[1], score, ARGV[1])
if #KEYS == 3 then
  redis.call('ZADD', KEYS[2], 0, ARGV[3])
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
end
return {0, score}
