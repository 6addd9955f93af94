-- Claim an account name (Store.create_account, Store.ensure_account): the first SET NX wins and everyone reads the
-- winner, so two nodes creating one name at once (issue 31: `serve --dev` started together) make one account. The
-- record is written before (its own slot: accounts.py) and is taken back by the loser.
-- KEYS[1] the name index. ARGV[1] the new account's id. Returns the id the name has (the new one when it was free).
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
