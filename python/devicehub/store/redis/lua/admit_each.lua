-- Registering endpoints' accounts and device ids, several in one script run (enrolment.py; script_calls.py gathers
-- the admissions of Registers arriving together: on one Redis a group of them is one call, in a cluster each is a
-- call in its name's slot). Issue 30 #5: a script call per admission cost the node ~12 µs of redis-py per command
-- and Redis a script run each; each admission is still one atomic step, in order.
-- Per admission, as before in one script each (issue 16: one round trip, not three commands):
--   'e' (admit_endpoint): the account is the name's enrolment, else the default ('' for none: refused);
--   'a' (admit_authenticated, issue 28 #1): the proven account, refused when the name is enrolled into another; a
--   name enrolled nowhere is enrolled into it first.
--   Then the name's id in that account is the claim: the first HSETNX wins and everyone reads the winner.
-- KEYS: per admission the name's enrolment key and the name's ids per account (both in the name's slot).
-- ARGV[1], msgpack: per admission {kind, account id, the id for a name that has none}.
-- Returns per admission: 'e' {account id, device id} or false; 'a' the device id or false.
local admissions = cmsgpack.unpack(ARGV[1])
local replies = {}
for i, admission in ipairs(admissions) do
  local enrolment, ids = KEYS[2 * i - 1], KEYS[2 * i]
  local kind, account, minted = admission[1], admission[2], admission[3]
  local owner = redis.call('GET', enrolment)
  local reply = false
  if kind == 'e' then
    account = owner or account
    if account ~= '' then
      redis.call('HSETNX', ids, account, minted)
      reply = {account, redis.call('HGET', ids, account)}
    end
  elseif not owner or owner == account then
    if not owner then
      redis.call('SET', enrolment, account)
    end
    redis.call('HSETNX', ids, account, minted)
    reply = redis.call('HGET', ids, account)
  end
  replies[i] = reply
end
return replies
