-- Release a lease only if the caller still holds it (Store.release_lease).
-- KEYS[1] the lease hash; ARGV[1] owner.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
