-- The one device id of (account, endpoint name) in one round trip (Store.claim_device_id): the name index is the
-- claim; the first SET NX wins and everyone reads the winner.
-- KEYS[1] the name index key. ARGV[1] the id for a name that has none. Returns the name's id.
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
