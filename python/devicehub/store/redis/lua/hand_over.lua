-- Hand a device's work to the node holding it (channels/holders.py, issue 31 #1), if that node is alive: its
-- heartbeat key exists. Checked and added in one step, so work is never added for a node known to be gone.
-- KEYS[1] the holder's heartbeat, KEYS[2] its work stream. ARGV[1] the stream's length bound, ARGV[2] the work.
-- Returns 1 when added, 0 when the holder is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'w', ARGV[2])
return 1
