-- touch: a live parent extends the lease of the job its horse is running.
-- KEYS[1] base ; ARGV: job_id, token, lease_seconds
-- Returns 1, or 0 when this attempt no longer owns the job (reaped, canceled):
-- the parent then kills its horse, so one job never has two horses.
local base = KEYS[1]
local jkey = base .. 'job:' .. ARGV[1]
local bad = check_types(base, jkey)
if bad then return redis.error_reply(bad) end
if hget(jkey, 'token') ~= ARGV[2] or hget(jkey, 'status') ~= 'started' then return 0 end
redis.call('ZADD', base .. 'started', 'XX', fmt_time(now() + tonumber(ARGV[3])), ARGV[1])
return 1
