-- A registering endpoint's account and device id in one round trip (Store.admit_endpoint; issue 16: three
-- commands one after the other were a fifth of a Redis-mode node's CPU per Register).
-- The account is the name's enrolment, else the default; the name index of that account is the claim: the first
-- SET NX wins and everyone reads the winner. The index key depends on the account read here, so it is built here
-- (the store runs on one Redis, never a cluster: its transactions span keys of every kind).
-- KEYS[1] the name's enrolment key. ARGV[1] the default account id ('' for none), ARGV[2] the name index's key
-- prefix, ARGV[3] the endpoint name, ARGV[4] the id for a name that has none.
-- Returns {account id, device id}, or false when no account is named.
local account = redis.call('GET', KEYS[1])
if not account then
  if ARGV[1] == '' then
    return false
  end
  account = ARGV[1]
end
local key = ARGV[2] .. account .. ':' .. ARGV[3]
redis.call('SET', key, ARGV[4], 'NX')
return {account, redis.call('GET', key)}
