-- progress: store what a running job reported (progress, message, meta: sent by its
-- horse through the worker parent, see progress.py), fenced by the attempt's token
-- (invariant 7): a late horse of an attempt that was taken back (reaped, deleted,
-- canceled) writes nothing, and a deleted job's record is never re-created.
-- KEYS[1] base
-- ARGV: job_id, token, field, value, ...   (progress, progress_message, progress_at, meta)
-- Returns 1 (written; the job's progress_writes counts it) | 0 (not this attempt's job)
-- No type check of the queue's keys: only the job hash is written, and hget() reads a
-- key of another type as missing, so such a key is refused (0) before any write.
local base = KEYS[1]
local jkey = base .. K.job .. ARGV[1]
if hget(jkey, F.token) ~= ARGV[2] or hget(jkey, F.status) ~= S.started then return 0 end
if #ARGV > 2 then redis.call('HSET', jkey, unpack(ARGV, 3)) end
redis.call('HINCRBY', jkey, F.progress_writes, 1)
return 1
