-- use: add a finished attempt's worker time to its queue's decayed use (fair share,
-- `worker --fair`, fusionworker/runtime/fairshare.py). The use is a number that halves
-- every `half_life` seconds without work (an exponentially decayed sum of worker
-- seconds), kept as {v = value at t, t = this server's time} in the hash `use`; every
-- worker serving the queue adds to the same hash, so the share is the deployment's.
-- The key expires after 20 half-lives without an attempt (its value is then ~0).
-- KEYS[1] base ; ARGV: seconds, half_life
-- Returns {value now, now}
local base = KEYS[1]
local seconds, half = tonumber(ARGV[1]) or 0, tonumber(ARGV[2]) or 60
if half <= 0 then half = 60 end
local t = now()
local key = base .. K.use
local bad = wrong_type(key, 'hash')
if bad then return redis.error_reply(bad) end
local old = redis.call('HMGET', key, 'v', 't')
local v, at = tonumber(old[1]) or 0, tonumber(old[2]) or t
if at > t then at = t end
v = v * math.pow(2, -(t - at) / half) + math.max(0, seconds)
redis.call('HSET', key, 'v', string.format('%.6f', v), 't', fmt_time(t))
redis.call('EXPIRE', key, math.ceil(20 * half))
return {string.format('%.6f', v), fmt_time(t)}
