-- dep_done: apply "dependency REF ended with OUTCOME" to a deferred job, on the
-- DEPENDENT's queue (workflows.py). Idempotent: a note replayed twice, or applied
-- both by the producer's re-check and by an outbox replay, counts once (SREM).
-- KEYS[1] base of the dependent's queue
-- ARGV: job_id, dependency ref ("queue:job_id"), outcome (finished|failed|canceled|missing),
--       result_ttl (retention of a canceled record)
-- Returns {'queued'} | {'waiting'} | {'canceled'} | {'already'} | {'ignored', status}
local base = KEYS[1]
local jid, ref, outcome, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]) or 0
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if st ~= S.deferred then return {'ignored', st or 'missing'} end
local deps = base .. K.deps .. jid
if redis.call('SREM', deps, ref) == 0 then return {'already'} end
local t = now()
if outcome ~= S.finished and hget(jkey, F.allow_dependency_failure) ~= '1' then
  redis.call('DEL', deps)
  redis.call('ZREM', base .. K.deferred, jid)
  redis.call('HSET', jkey, F.status, S.canceled, F.ended_at, fmt_time(t),
    F.failure_reason, R.dependency, F.error_type, 'DependencyFailed',
    F.error_message, 'dependency ' .. ref .. ' ' .. outcome)
  redis.call('PUBLISH', base .. K.done .. jid, S.canceled)   -- Job.wait
  drop_unique(base, jid)
  notify_dependents(base, jid, S.canceled)
  redis.call('ZADD', base .. K.canceled, fmt_time(t), jid)
  if ttl > 0 then redis.call('EXPIRE', jkey, ttl) end
  return {'canceled'}
end
if redis.call('SCARD', deps) == 0 then
  redis.call('ZREM', base .. K.deferred, jid)
  make_ready(base, jid)
  return {'queued'}
end
return {'waiting'}
