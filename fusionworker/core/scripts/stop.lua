-- stop: ask the worker running a started job to kill its horse (Queue.stop; the
-- sequence is in docs/design.md, "Stopping a running job"). The job then ends
-- 'stopped' (finish.lua), or, should its worker die first, when the reaper takes
-- it back (requeue.lua 'reap' fails a stop-requested job as stopped, no retry).
-- KEYS[1] base ; ARGV: job_id
-- Returns {'stopping', worker} | {'not_started', status} | {'ended', status} | {'missing'}
-- Writes only for a started job: `stop_requested` on its record (the heartbeat's
-- touch_many.lua answers 2 for it: a worker that missed the message hears it
-- there), then one PUBLISH on `stop` of the queue (workers PSUBSCRIBE to it).
local base = KEYS[1]
local jid = ARGV[1]
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st == S.queued or st == S.scheduled or st == S.deferred then return {'not_started', st} end
if st ~= S.started then return {'ended', st} end
redis.call('HSET', jkey, F.stop_requested, fmt_time(now()))
local worker = hget(jkey, F.worker_name) or ''
redis.call('PUBLISH', base .. K.stop, jid)
return {'stopping', worker}
