-- Delete a bootstrap configuration only if the caller's account owns it (Store.delete_bootstrap_config).
-- KEYS[1] the configuration hash, KEYS[2] the account's name index; ARGV[1] account id, ARGV[2] endpoint name.
if redis.call('HGET', KEYS[1], 'account') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
