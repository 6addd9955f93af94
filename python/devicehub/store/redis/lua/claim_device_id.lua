-- The one device id of (account, endpoint name) in one round trip (Store.claim_device_id): the name's hash of ids
-- per account is the claim; the first HSETNX wins and everyone reads the winner.
-- KEYS[1] the name's ids per account. ARGV[1] the account id, ARGV[2] the id for a name that has none.
-- Returns the name's id.
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
