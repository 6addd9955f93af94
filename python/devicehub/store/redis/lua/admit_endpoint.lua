-- A registering endpoint's account and device id in one round trip (Store.admit_endpoint; issue 16: three
-- commands one after the other were a fifth of a Redis-mode node's CPU per Register).
-- The account is the name's enrolment, else the default; the name's id in that account is the claim: the first
-- HSETNX wins and everyone reads the winner.
-- KEYS[1] the name's enrolment key, KEYS[2] the name's ids per account (both in the name's slot). ARGV[1] the
-- default account id ('' for none), ARGV[2] the id for a name that has none.
-- Returns {account id, device id}, or false when no account is named.
local account = redis.call('GET', KEYS[1])
if not account then
  if ARGV[1] == '' then
    return false
  end
  account = ARGV[1]
end
redis.call('HSETNX', KEYS[2], account, ARGV[2])
return {account, redis.call('HGET', KEYS[2], account)}
