-- hold: a queued or scheduled job is set aside: no claim takes it until release.lua
-- puts it back where it was. The job leaves `pending` (or `scheduled`) for `held`
-- (score: when it was held) in this one call, so no claim can see it half-held: a
-- claim before the call may take it (then it is started and refused here), a claim
-- after it never finds it. Its score in the ZSET it left (priority and FIFO place,
-- or its due time) is kept in the record (`held_score`, `held_from`), so release
-- gives it back the same place.
-- A job queued behind its group's running job (on the group's list, in no ZSET) and
-- a job waiting on its dependencies (deferred) are refused: they are not ready.
-- KEYS[1] base ; ARGV: job_id
-- Returns {'held', previous_status} | {'refused', status[, 'group']} | {'missing'}
-- ('group': a queued job waiting on its group's list)
local base = KEYS[1]
local jid = ARGV[1]
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st == S.held then return {'held', st} end       -- already held: nothing to do
local from = (st == S.queued and K.pending) or (st == S.scheduled and K.scheduled) or nil
local score = from and redis.call('ZSCORE', base .. from, jid)
if not score then return {'refused', st, st == S.queued and 'group' or nil} end
local bad = wrong_type(base .. K.held, 'zset') or wrong_type(jkey, 'hash')
if bad then return redis.error_reply(bad) end
local t = now()
redis.call('ZREM', base .. from, jid)
redis.call('ZADD', base .. K.held, fmt_time(t), jid)
redis.call('HSET', jkey, F.status, S.held, F.held_from, st, F.held_score, score,
  F.held_at, fmt_time(t))
return {'held', st}
