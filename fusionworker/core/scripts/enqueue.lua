-- enqueue: dedup check, sequence number, job record, and pending/scheduled/group
-- placement in one step.
-- KEYS[1] base ; KEYS[2] (optional) the queue registry SET fw:queues: registered here,
--   with the job, so a queue emptied by a data loss is registered again by its next job.
--   A Redis Cluster passes no KEYS[2] (another slot): the producer SADDs before the script.
-- KEYS[3] (optional, with KEYS[2]) the event stream <prefix>:events: the new job's
--   "queued" event is XADDed to it and to the job's history in this same step, as
--   enqueue_many.lua does (Queue passes it on a single Redis when its events go to that
--   stream; without it the producer emits the event to its sink).
-- ARGV: job_id, priority, mode (now|in|at), when, unique_key, dedup_window, the stream's
--   approximate MAXLEN and the events' host name ('' without KEYS[3]), field, value, ...
-- Returns {placement, job_id, status}: placement is queued | scheduled | duplicate;
-- a new job's answer goes on with {seq, enqueued_at[, scheduled_for]}, so the producer
-- builds its Job from what it sent and needs no read back.
-- Refused while forget_queue deletes the queue (forgetting, _lib.lua).
-- Nothing is half-written on a refusal. A new id without a group (the usual job) takes
-- the short path: reads first (the record's TYPE, the unique key), then the writes that
-- can meet a key of the wrong type, each undoing the ones before it when it fails
-- (INCR seq, SADD fw:queues, ZADD pending|scheduled), then the ones that cannot (the
-- new record's one HSET, SET of the unique key, PUBLISH). A record to replace or a
-- group checks every key it may write first, as the other scripts do.
local base = KEYS[1]
local jid, prio, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local when, ukey, window = tonumber(ARGV[4]) or 0, ARGV[5], tonumber(ARGV[6]) or 0
local gone = forgetting(base)
if gone then return redis.error_reply(gone) end
local t = now()
local stream = KEYS[3]
local jkey = base .. K.job .. jid
local jtype = key_type(jkey)
if jtype ~= 'none' and jtype ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. jkey .. ' holds a ' .. jtype ..
    ', not a hash: refused before any write')
end
local stype = stream and key_type(stream) or 'none'
if stype ~= 'none' and stype ~= 'stream' then
  return redis.error_reply('WRONGTYPE ' .. stream .. ' holds a ' .. stype ..
    ', not a stream: refused before any write')
end
if jtype == 'hash' then
  local st = live_status(base, jid, t, window)
  if st then return {'duplicate', jid, st} end
end
if ukey ~= '' then
  local other = redis.call('GET', base .. K.unique .. ukey)
  if other then
    local st = live_status(base, other, t, window)
    if st then return {'duplicate', other, st} end
  end
end

local at   -- when a delayed job becomes due (nil: now)
if mode ~= 'now' then
  at = when
  if mode == 'in' then at = t + when end
  if at <= t then at = nil end
end
local group, front   -- front: at_front, placed by push_pending (_lib.lua)
local qname, func    -- the event's
for i = 9, #ARGV - 1, 2 do
  local name = ARGV[i]
  if name == F.group and ARGV[i + 1] ~= '' then group = ARGV[i + 1] end
  if name == F.at_front then front = true end
  if name == F.queue then qname = ARGV[i + 1] elseif name == F.func then func = ARGV[i + 1] end
end
local function event()   -- the new job's "queued" event (nothing when no stream is given)
  if stream then
    queued_event(base, stream, ARGV[7], iso_utc(t), jid,
      qname, func, prio, ARGV[8])
  end
end

if jtype == 'none' and not group and not front then
  local skey = base .. K.seq
  local seq = redis.call('INCR', skey)   -- the first write: failing, it wrote nothing
  local function undo(err, added)
    if added == 1 then redis.call('SREM', KEYS[2], string.match(base, '{(.*)}:$')) end
    if seq == 1 then redis.call('DEL', skey) else redis.call('DECR', skey) end
    return redis.error_reply(err)
  end
  if seq >= SEQ_LIMIT then return undo('queue sequence exhausted (2^42 enqueues)') end
  local added = 0
  if KEYS[2] then
    added = redis.pcall('SADD', KEYS[2], string.match(base, '{(.*)}:$'))
    if type(added) == 'table' then return undo(added.err) end
  end
  local placed = redis.pcall('ZADD', base .. (at and K.scheduled or K.pending),
    at and fmt_time(at) or fmt_int(prio * SEQ_LIMIT - seq), jid)
  if type(placed) == 'table' then return undo(placed.err, added) end
  local rec = {unpack(ARGV, 9)}   -- the caller's fields, then ours (the later one wins)
  for _, v in ipairs({F.id, jid, F.seq, seq, F.priority, prio, F.attempts, 0,
                      F.enqueued_at, fmt_time(t), F.status, at and S.scheduled or S.queued}) do
    rec[#rec + 1] = v
  end
  if at then
    rec[#rec + 1] = F.scheduled_for
    rec[#rec + 1] = fmt_time(at)
  end
  redis.call('HSET', jkey, unpack(rec))
  if ukey ~= '' then redis.call('SET', base .. K.unique .. ukey, jid) end
  -- a scheduled job wakes too: an idle worker learns when it is due (claim.py, quiet)
  if at then redis.call('PUBLISH', base .. K.wake, jid) else wake_if_first(base, jid) end
  event()
  if at then return {'scheduled', jid, S.scheduled, fmt_int(seq), fmt_time(t), fmt_time(at)} end
  return {'queued', jid, S.queued, fmt_int(seq), fmt_time(t)}
end

local bad = check_types(base)
if bad then return redis.error_reply(bad) end
if KEYS[2] and key_type(KEYS[2]) ~= 'set' and key_type(KEYS[2]) ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' is not a set: refused before any write')
end
if jtype == 'hash' then
  -- an ended record with the same id (failed, canceled, finished long ago): replace it
  for _, reg in ipairs({K.failed, K.finished, K.canceled, K.scheduled, K.pending, K.started}) do
    redis.call('ZREM', base .. reg, jid)
  end
  redis.call('DEL', jkey)
end

local ok, err = new_job(base, jid, prio, t, ARGV, 9)
if not ok then return redis.error_reply(err) end
local seq = redis.call('HGET', jkey, F.seq)
if KEYS[2] then redis.call('SADD', KEYS[2], string.match(base, '{(.*)}:$')) end
if ukey ~= '' then redis.call('SET', base .. K.unique .. ukey, jid) end

if at then
  redis.call('HSET', jkey, F.status, S.scheduled, F.scheduled_for, fmt_time(at))
  redis.call('ZADD', base .. K.scheduled, fmt_time(at), jid)
  redis.call('PUBLISH', base .. K.wake, jid)   -- an idle worker learns when it is due
  event()
  return {'scheduled', jid, S.scheduled, seq, fmt_time(t), fmt_time(at)}
end
make_ready(base, jid)
event()
return {'queued', jid, S.queued, seq, fmt_time(t)}
