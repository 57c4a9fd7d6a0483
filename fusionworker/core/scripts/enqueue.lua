-- enqueue: dedup check, sequence number, job record, and pending/scheduled/group
-- placement in one step.
-- KEYS[1] base ; KEYS[2] (optional) the queue registry SET fw:queues: registered here,
--   with the job, so a queue emptied by a data loss is registered again by its next job.
--   A Redis Cluster passes no KEYS[2] (another slot): the producer SADDs before the script.
-- ARGV: job_id, priority, mode (now|in|at), when, unique_key, dedup_window, field, value, ...
-- Returns {placement, job_id, status}: placement is queued | scheduled | duplicate;
-- a new job's answer goes on with {seq, enqueued_at[, scheduled_for]}, so the producer
-- builds its Job from what it sent and needs no read back.
local base = KEYS[1]
local jid, prio, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local when, ukey, window = tonumber(ARGV[4]) or 0, ARGV[5], tonumber(ARGV[6]) or 0
local t = now()
local bad = check_types(base, base .. 'job:' .. jid)
if bad then return redis.error_reply(bad) end
if KEYS[2] and key_type(KEYS[2]) ~= 'set' and key_type(KEYS[2]) ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a set: refused before any write')
end

local st = live_status(base, jid, t, window)
if st then return {'duplicate', jid, st} end
if ukey ~= '' then
  local other = redis.call('GET', base .. 'unique:' .. ukey)
  if other then
    st = live_status(base, other, t, window)
    if st then return {'duplicate', other, st} end
  end
end

local jkey = base .. 'job:' .. jid
if redis.call('EXISTS', jkey) == 1 then
  -- an ended record with the same id (failed, canceled, finished long ago): replace it
  for _, reg in ipairs({'failed', 'finished', 'canceled', 'scheduled', 'pending', 'started'}) do
    redis.call('ZREM', base .. reg, jid)
  end
  redis.call('DEL', jkey)
end

local ok, err = new_job(base, jid, prio, t, ARGV, 7)
if not ok then return redis.error_reply(err) end
local seq = redis.call('HGET', jkey, 'seq')
if KEYS[2] then redis.call('SADD', KEYS[2], string.match(base, '{(.*)}:$')) end
if ukey ~= '' then redis.call('SET', base .. 'unique:' .. ukey, jid) end

if mode ~= 'now' then
  local at = when
  if mode == 'in' then at = t + when end
  if at > t then
    redis.call('HSET', jkey, 'status', 'scheduled', 'scheduled_for', fmt_time(at))
    redis.call('ZADD', base .. 'scheduled', fmt_time(at), jid)
    return {'scheduled', jid, 'scheduled', seq, fmt_time(t), fmt_time(at)}
  end
end
make_ready(base, jid)
return {'queued', jid, 'queued', seq, fmt_time(t)}
