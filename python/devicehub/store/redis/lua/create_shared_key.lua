-- Create a device's pre-shared key and enrol its endpoint name into the key's account (Store.create_shared_key,
-- issue 28 #1), unless the name belongs to another account: enrolled there, configured for bootstrap there, or
-- holding a key there. Nothing is written unless 'created'. The indexes that list the key are written after (their
-- own slots: credentials.py).
-- KEYS[1] the key's record, KEYS[2] the name's enrolment key, KEYS[3] the name's bootstrap configuration hash,
-- KEYS[4] the account holding the key (all in the name's slot). ARGV[1] the account id, ARGV[2] the encoded record.
-- Returns 'created', 'exists' (this account holds a key for the name) or 'taken'.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('GET', KEYS[4]) == ARGV[1] then
    return 'exists'
  end
  return 'taken'
end
local enrolled = redis.call('GET', KEYS[2])
local configured = redis.call('HGET', KEYS[3], 'account')
if (enrolled and enrolled ~= ARGV[1]) or (configured and configured ~= ARGV[1]) then
  return 'taken'
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[4], ARGV[1])
if not enrolled then
  redis.call('SET', KEYS[2], ARGV[1])
end
return 'created'
