-- reprioritize: give a pending job a new priority, keeping its FIFO place.
-- KEYS[1] base ; ARGV: job_id, priority
-- Returns {'ok', old_priority} | {'refused', status} | {'missing'}
local base = KEYS[1]
local jid, prio = ARGV[1], tonumber(ARGV[2])
local jkey = base .. K.job .. jid
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st ~= S.queued and st ~= S.scheduled then return {'refused', st} end
local old = hget(jkey, F.priority) or '0'
redis.call('HSET', jkey, F.priority, prio)
if redis.call('ZSCORE', base .. K.pending, jid) then
  local seq = tonumber(hget(jkey, F.seq) or '0') or 0
  redis.call('ZADD', base .. K.pending, fmt_int(prio * SEQ_LIMIT - seq), jid)
end
return {'ok', old}
