-- cancel: a queued, scheduled, deferred or held job will not run. Started jobs are refused.
-- KEYS[1] base ; ARGV: job_id, result_ttl
-- Returns {'canceled', previous_status} | {'refused', status} | {'missing'}
local base = KEYS[1]
local jid, ttl = ARGV[1], tonumber(ARGV[2])
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st ~= S.queued and st ~= S.scheduled and st ~= S.deferred and st ~= S.held then
  return {'refused', st}
end
local t = now()
redis.call('ZREM', base .. K.pending, jid)
redis.call('ZREM', base .. K.scheduled, jid)
redis.call('ZREM', base .. K.deferred, jid)  -- waiting on dependencies
if st == S.held then
  redis.call('ZREM', base .. K.held, jid)
  redis.call('HDEL', jkey, F.held_from, F.held_score, F.held_at)
end
redis.call('DEL', base .. K.deps .. jid)
local group = hget(jkey, F.group)
if group and group ~= '' then redis.call('LREM', base .. K.group .. group, 0, jid) end
redis.call('HSET', jkey, F.status, S.canceled, F.ended_at, fmt_time(t))
redis.call('PUBLISH', base .. K.done .. jid, S.canceled)   -- Job.wait
drop_unique(base, jid)
release_group(base, jid)
notify_dependents(base, jid, S.canceled)
redis.call('ZADD', base .. K.canceled, fmt_time(t), jid)
if ttl > 0 then
  redis.call('EXPIRE', jkey, ttl)
  prune(base .. K.canceled, t - ttl)
end
return {'canceled', st}
