-- save_meta: the producer writes a job's meta (Job.save_meta), never re-creating a
-- record that is gone.
-- KEYS[1] base ; ARGV: job_id, meta (tagged JSON)
-- Returns 1 | 0 (no such job)
local jkey = KEYS[1] .. K.job .. ARGV[1]
if redis.call('EXISTS', jkey) == 0 then return 0 end
redis.call('HSET', jkey, F.meta, ARGV[2])
return 1
