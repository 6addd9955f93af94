-- Delete a device's keys in its slot in one step (Store.delete_device) and hand back what names it from other slots:
-- its record (account, endpoint name: indexes) and its queued requests (their blobs, the global queue index).
-- KEYS[1] the record, KEYS[2] the request queue, KEYS[3..] the device's other keys. Returns {record or nil, members}.
local record = redis.call('GET', KEYS[1])
local queued = redis.call('ZRANGE', KEYS[2], 0, -1)
redis.call('DEL', unpack(KEYS))
return {record, queued}
