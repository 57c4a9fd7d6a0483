-- requeue: put a job back on its queue at its original priority and FIFO place.
-- KEYS[1] base
-- ARGV: job_id, mode, token, failed_ttl[, field, value, ...]
--   mode 'reap'   : a started job whose lease expired and whose worker is gone
--                   (the caller checked the worker). Its worker died or froze under
--                   it, beside other jobs: re-queued with the attempt NOT counted and
--                   'shared_deaths' + 1 and 'worker_deaths' + 1 (it runs alone next:
--                   runtime/solo.py), or failed as 'abandoned' at max(SHARED_MAX,
--                   max_retries + 1) such deaths (a job that takes its worker down
--                   is not run forever);
--                   a job whose stop was asked (stop.lua) ends 'stopped' instead;
--                   an attempt that ran alone in its worker ('alone' = its token,
--                   alone.lua) fails as the culprit: {'abandoned', 'culprit'}.
--   mode 'return' : cold shutdown gives back the job its horse was running; the
--                   interrupted attempt is not counted. Fields given after
--                   failed_ttl (the attempt's last progress and meta) are
--                   written with it.
--   mode 'failed' : from the failed registry (dead-letter: failed or stopped); attempts
--                   start over, a stop asked of the last attempt is forgotten.
-- Returns {'requeued'} | {'abandoned'[, 'stopped' | 'culprit']} | {'skipped', why}
local base = KEYS[1]
local jid, mode, token, failed_ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local jkey = base .. K.job .. jid
local bad = check_types(base, jkey)
if bad then return redis.error_reply(bad) end
local st = hget(jkey, F.status)
if mode == 'reap' and st ~= S.started then
  redis.call('ZREM', base .. K.started, jid)  -- a stale entry: no attempt of it can run
end
if not st then return {'skipped', 'no such job'} end
local t = now()

if mode == 'failed' then
  -- a stopped job is in the failed registry too (RQ's FailedJobRegistry holds both)
  if st ~= S.failed and st ~= S.stopped then
    return {'skipped', 'job is ' .. st .. ', not failed'}
  end
  redis.call('ZREM', base .. K.failed, jid)
  redis.call('PERSIST', jkey)
  redis.call('HSET', jkey, F.attempts, 0)
  redis.call('HINCRBY', jkey, F.requeues, 1)   -- a new life: its callbacks run again
  -- the failed attempt's times go: the job has not started since it was requeued; and
  -- a stop asked of an attempt (stop.lua) is not asked of the next one
  redis.call('HDEL', jkey, F.started_at, F.ended_at, F.duration, F.token, F.shared_deaths,
    F.worker_deaths, F.alone, F.stop_requested, F.not_retried)
  local ukey = hget(jkey, F.unique_key)
  if ukey and ukey ~= '' then redis.call('SET', base .. K.unique .. ukey, jid) end
  make_ready(base, jid)
  return {'requeued'}
end

if st ~= S.started then return {'skipped', 'job is ' .. st} end
if token ~= '' and hget(jkey, F.token) ~= token then return {'skipped', 'attempt changed'} end
local deadline = redis.call('ZSCORE', base .. K.started, jid)
if mode == 'reap' and deadline and tonumber(deadline) > t then
  return {'skipped', 'lease still valid'}
end
redis.call('ZREM', base .. K.started, jid)
redis.call('HDEL', jkey, F.token)
if mode == 'return' then
  if #ARGV > 4 then redis.call('HSET', jkey, unpack(ARGV, 5)) end
  redis.call('HINCRBY', jkey, F.attempts, -1)
  push_pending(base, jid)
  return {'requeued'}
end
if hget(jkey, F.stop_requested) then   -- its worker died before the stop: never again
  redis.call('HSET', jkey, F.error_type, 'JobStopped', F.failure_reason, R.stopped,
    F.error_message, 'stopped on request; worker ' .. (hget(jkey, F.worker_name) or '?') ..
    ' died before it killed the job', F.not_retried, 'stopped on request')
  to_failed(base, jid, t, failed_ttl, S.stopped)
  return {'abandoned', S.stopped}
end
local worker_deaths = tonumber(hget(jkey, F.worker_deaths) or '0') or 0
if token ~= '' and hget(jkey, F.alone) == token then   -- it ran alone: its worker's death is its
  redis.call('HSET', jkey, F.error_type, 'WorkerKilled', F.failure_reason, R.killed,
    F.error_message, 'the worker this job ran in alone died (worker ' ..
    (hget(jkey, F.worker_name) or '?') .. '); its worker had died under it ' .. worker_deaths ..
    ' time(s) before, beside other jobs: taken for the culprit, not run again',
    F.not_retried, 'not retried: its worker died while it ran there alone (the culprit)')
  to_failed(base, jid, t, failed_ttl)
  return {'abandoned', 'culprit'}
end
-- at least SHARED_MAX (runtime/recorder.py SHARED_DEATHS_MAX), more if the job allows more
local SHARED_MAX = 3
local max_retries = tonumber(hget(jkey, F.max_retries) or '0') or 0
local deaths = (tonumber(hget(jkey, F.shared_deaths) or '0') or 0) + 1
redis.call('HSET', jkey, F.shared_deaths, deaths, F.worker_deaths, worker_deaths + 1)
if deaths >= math.max(SHARED_MAX, max_retries + 1) then
  redis.call('HSET', jkey, F.error_type, 'Abandoned', F.failure_reason, R.abandoned,
    F.error_message, 'worker ' .. (hget(jkey, F.worker_name) or '?') ..
    ' died (or stopped answering) while running the job; its worker was lost under it ' ..
    deaths .. ' times: not run again', F.not_retried,
    'not retried: its worker was lost under it ' .. deaths .. ' times')
  to_failed(base, jid, t, failed_ttl)
  return {'abandoned'}
end
redis.call('HINCRBY', jkey, F.attempts, -1)
push_pending(base, jid)
return {'requeued'}
