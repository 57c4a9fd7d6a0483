-- progress: store what a running job reported (progress, message, meta: sent by its
-- horse through the worker parent, see progress.py), fenced by the attempt's token
-- (invariant 7): a late horse of an attempt that was taken back (reaped, deleted,
-- canceled) writes nothing, and a deleted job's record is never re-created.
-- KEYS[1] base; KEYS[2] (optional) the event stream <prefix>:events
-- ARGV: job_id, token, the progress event's block (event_block, _lib.lua: '' without
--       KEYS[2]), then field, value, ...   (progress, progress_message, progress_at, meta)
-- The event is written after the fields, under pcall (job_event): it never refuses them.
-- Returns 1 (written; the job's progress_writes counts it) | 0 (not this attempt's job) |
--   why the event was not written (the fields were: a key of another type, job_event)
-- No type check of the queue's keys: only the job hash is written, and hget() reads a
-- key of another type as missing, so such a key is refused (0) before any write.
local base = KEYS[1]
local jkey = base .. K.job .. ARGV[1]
if hget(jkey, F.token) ~= ARGV[2] or hget(jkey, F.status) ~= S.started then return 0 end
local event, fa = event_block(3)
if #ARGV >= fa then redis.call('HSET', jkey, unpack(ARGV, fa)) end
redis.call('HINCRBY', jkey, F.progress_writes, 1)
if event and KEYS[2] then
  return job_event(base, ARGV[1], KEYS[2], event.maxlen, now(), event.ev, event.copy) or 1
end
return 1
