-- Insert or replace a bootstrap configuration (Store.put_bootstrap_config) unless the endpoint name is
-- configured by, or enrolled into, another account. The account's index of names is written after (its own slot).
-- KEYS[1] the configuration hash, KEYS[2] the enrollment key; ARGV[1] account id, ARGV[2] the encoded configuration.
local owner = redis.call('HGET', KEYS[1], 'account')
local enrolled = redis.call('GET', KEYS[2])
if (owner and owner ~= ARGV[1]) or (enrolled and enrolled ~= ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'account', ARGV[1], 'data', ARGV[2])
return 1
