-- Create an account unless its name is taken, in one step (Store.create_account, Store.ensure_account): the name
-- index, the record and the listing change together, so no reader finds a name whose record is not written yet
-- and two nodes creating one name at once (issue 31: `serve --dev` started together) make one account.
-- KEYS[1] the name index, KEYS[2] the new account's record, KEYS[3] the set of account ids.
-- ARGV[1] the new account's id, ARGV[2] its record. Returns the id the name has (the new one when it was free).
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('SADD', KEYS[3], ARGV[1])
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
