-- run_now: a scheduled job (delayed, or waiting for a retry) becomes due now (the
-- dashboard's "Run now"): its score and `scheduled_for` become the server time; the
-- next claim promotes it. Nothing is done when it left `scheduled` meanwhile.
-- KEYS[1] base ; ARGV: job_id
-- Returns 1 | 0 (not scheduled)
local base, jid = KEYS[1], ARGV[1]
if not redis.call('ZSCORE', base .. K.scheduled, jid) then return 0 end
local t = now()
redis.call('ZADD', base .. K.scheduled, t, jid)
redis.call('HSET', base .. K.job .. jid, F.scheduled_for, fmt_time(t))
return 1
