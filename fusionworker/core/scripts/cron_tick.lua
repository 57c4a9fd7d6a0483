-- cron_tick: handle one due time of one cron entry, exactly once across all
-- workers. Compare-and-set on the entry's score: the caller read score = due
-- and computed the next run (croniter, in Python); only the first caller whose
-- due still matches advances the score, and in the same step enqueues the run.
-- KEYS[1] base
-- ARGV: name, due, next_run, action (run|skip), job_id, reason (due|catch_up)
-- Returns {'queued', job_id} | {'skipped', running_job_id} | {'missed'} |
--         {'moved'} (someone else handled it, or the entry changed/was removed) |
--         {'early'} | {'paused'}
local base = KEYS[1]
local name, due, nxt = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local action, jid, reason = ARGV[4], ARGV[5], ARGV[6]
local ekey = base .. K.cron_entry .. name
local score = redis.call('ZSCORE', base .. K.cron, name)
if not score or tonumber(score) ~= due then return {'moved'} end
-- the queue is being deleted (forget_queue): the entry goes with it, nothing is run
if redis.call('EXISTS', base .. K.forgetting) == 1 then return {'moved'} end
if not hget(ekey, C.func) then  -- definition gone (removed half-way): drop the entry
  redis.call('ZREM', base .. K.cron, name)
  return {'moved'}
end
local t = now()
if due > t then return {'early'} end
if hget(ekey, C.paused) == '1' then
  redis.call('ZADD', base .. K.cron, 'inf', name)
  return {'paused'}
end
if not nxt or nxt <= due then return redis.error_reply('cron next run must be after its due time') end

redis.call('ZADD', base .. K.cron, fmt_int(nxt), name)
redis.call('HSET', ekey, C.next_run, fmt_int(nxt), C.last_due, fmt_int(due))

if action == 'skip' then  -- missed during downtime, catch_up=skip: no run
  redis.call('HSET', ekey, C.last_status, 'missed')
  redis.call('HINCRBY', ekey, C.misses, 1)
  return {'missed'}
end

if hget(ekey, C.allow_overlap) ~= '1' then
  local last = hget(ekey, C.last_job)
  if last then
    local st = hget(base .. K.job .. last, F.status)
    if st == S.queued or st == S.scheduled or st == S.started or st == S.held then
      redis.call('HSET', ekey, C.last_status, 'skipped')
      redis.call('HINCRBY', ekey, C.skips, 1)
      return {'skipped', last}
    end
  end
end

local fields = {F.queue, hget(ekey, C.queue), F.func, hget(ekey, C.func),
  F.args, hget(ekey, C.args) or '[]', F.kwargs, hget(ekey, C.kwargs) or '{}',
  F.cron, name, F.cron_due, fmt_int(due)}
for _, opt in ipairs({{F.timeout, C.timeout}, {F.max_retries, C.max_retries}}) do
  local v = hget(ekey, opt[2])
  if v and v ~= '' then
    fields[#fields + 1] = opt[1]
    fields[#fields + 1] = v
  end
end
local prio = tonumber(hget(ekey, C.priority) or '0') or 0
local ok, err = new_job(base, jid, prio, t, fields, 1)
if not ok then return redis.error_reply(err) end
make_ready(base, jid)
redis.call('HSET', ekey, C.last_run, fmt_int(due), C.last_job, jid,
  C.last_status, reason == 'catch_up' and 'caught_up' or 'queued',
  C.last_enqueued_at, fmt_time(t))
redis.call('HINCRBY', ekey, C.runs, 1)
return {'queued', jid}
