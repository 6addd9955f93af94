-- Queue a device request in one step (Store.enqueue_request): refused when its async-id is still pending for the
-- key, or when the device already has `max_pending` requests waiting (0: no bound).
-- KEYS[1] the request blob, KEYS[2] the device's queue (zset), KEYS[3] every queue (zset), KEYS[4] the sequence.
-- ARGV[1] the blob, ARGV[2] the queue member, ARGV[3] max_pending. Returns 0 queued, 1 duplicate, 2 full.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 1
end
local bound = tonumber(ARGV[3])
if bound > 0 and redis.call('ZCARD', KEYS[2]) >= bound then
  return 2
end
local seq = redis.call('INCR', KEYS[4])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], seq, ARGV[2])
redis.call('ZADD', KEYS[3], seq, ARGV[2])
return 0
