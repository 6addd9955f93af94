-- Take or renew a named lease (Store.acquire_lease): refused while another owner holds an unexpired one.
-- KEYS[1] the lease hash; ARGV[1] owner, ARGV[2] now, ARGV[3] new expiry (seconds on the caller's clock).
local holder = redis.call('HGET', KEYS[1], 'owner')
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires_at') or '0')
if holder and holder ~= ARGV[1] and expires > tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'expires_at', ARGV[3])
return 1
