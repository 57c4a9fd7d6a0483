-- delete: remove a job and every reference to it. A started job's horse keeps
-- running; its outcome is then refused (no token to match).
-- KEYS[1] base ; ARGV: job_id[, 'waiting']
-- 'waiting' (Queue.empty): only a queued or scheduled job; one a worker claimed since
-- it was listed is refused, and runs on; a waiting entry without a record is removed.
-- Returns {'deleted', previous_status} | {'refused', status} | {'missing'}
local base = KEYS[1]
local jid = ARGV[1]
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then
  if ARGV[2] == 'waiting' then     -- an entry whose record is gone: nothing to wait for
    redis.call('ZREM', base .. K.pending, jid)
    redis.call('ZREM', base .. K.scheduled, jid)
  end
  return {'missing'}
end
if ARGV[2] == 'waiting' and st ~= S.queued and st ~= S.scheduled then
  return {'refused', st}
end
redis.call('DEL', base .. K.deps .. jid)
for _, reg in ipairs({K.pending, K.started, K.scheduled, K.failed, K.finished, K.canceled,
                      K.deferred, K.held}) do
  redis.call('ZREM', base .. reg, jid)
end
local group = hget(jkey, F.group)
if group and group ~= '' then redis.call('LREM', base .. K.group .. group, 0, jid) end
drop_unique(base, jid)
release_group(base, jid)
-- jobs waiting on this one learn it is gone (a 'missing' note: canceled unless they
-- allow a failed dependency), now rather than at the reaper's sweep
local dkey = base .. K.dependents .. jid
for _, ref in ipairs(redis.call('SMEMBERS', dkey)) do
  redis.call('RPUSH', base .. K.outbox, cjson.encode({'missing', ref, jid}))
end
redis.call('DEL', dkey)
redis.call('DEL', jkey)
redis.call('PUBLISH', base .. K.done .. jid, 'deleted')   -- Job.wait
return {'deleted', st}
