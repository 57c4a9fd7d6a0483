-- delete: remove a job and every reference to it. A started job's horse keeps
-- running; its outcome is then refused (no token to match).
-- KEYS[1] base ; ARGV: job_id
-- Returns {'deleted', previous_status} | {'missing'}
local base = KEYS[1]
local jid = ARGV[1]
local jkey = base .. 'job:' .. jid
local st = hget(jkey, 'status')
if not st then return {'missing'} end
redis.call('DEL', base .. 'deps:' .. jid)
for _, reg in ipairs({'pending', 'started', 'scheduled', 'failed', 'finished', 'canceled',
                      'deferred', 'held'}) do
  redis.call('ZREM', base .. reg, jid)
end
local group = hget(jkey, 'group')
if group and group ~= '' then redis.call('LREM', base .. 'group:' .. group, 0, jid) end
drop_unique(base, jid)
release_group(base, jid)
-- jobs waiting on this one learn it is gone (a 'missing' note: canceled unless they
-- allow a failed dependency), now rather than at the reaper's sweep
local dkey = base .. 'dependents:' .. jid
for _, ref in ipairs(redis.call('SMEMBERS', dkey)) do
  redis.call('RPUSH', base .. 'outbox', cjson.encode({'missing', ref, jid}))
end
redis.call('DEL', dkey)
redis.call('DEL', jkey)
redis.call('PUBLISH', base .. 'done:' .. jid, 'deleted')   -- Job.wait
return {'deleted', st}
