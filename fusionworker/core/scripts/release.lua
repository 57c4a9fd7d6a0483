-- release: a held job (hold.lua) goes back to the ZSET it left, at the score it had
-- there (its priority and FIFO place, or its due time), with its status, in one call;
-- idle workers are woken as by an enqueue. A scheduled job whose time passed while it
-- was held is promoted by the next claim, as any due job is.
-- KEYS[1] base ; ARGV: job_id
-- Returns {'released', status now} | {'refused', status} | {'missing'}
local base = KEYS[1]
local jid = ARGV[1]
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st ~= S.held then return {'refused', st} end
local was = hget(jkey, F.held_from) or S.queued
local score = hget(jkey, F.held_score)
local into = was == S.scheduled and K.scheduled or K.pending
local bad = wrong_type(base .. into, 'zset')
if bad then return redis.error_reply(bad) end
redis.call('ZREM', base .. K.held, jid)
redis.call('HDEL', jkey, F.held_from, F.held_score, F.held_at)
if not score then          -- a record written by hand: queued at its priority, in order
  push_pending(base, jid)
  return {'released', S.queued}
end
redis.call('ZADD', base .. into, score, jid)
redis.call('HSET', jkey, F.status, was == S.scheduled and S.scheduled or S.queued)
redis.call('PUBLISH', base .. K.wake, jid)
return {'released', was == S.scheduled and S.scheduled or S.queued}
