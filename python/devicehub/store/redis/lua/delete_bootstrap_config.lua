-- Delete a bootstrap configuration only if the caller's account owns it (Store.delete_bootstrap_config); the
-- account's index entry goes after (its own slot).
-- KEYS[1] the configuration hash; ARGV[1] account id.
if redis.call('HGET', KEYS[1], 'account') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
