-- enqueue_many: a chunk of enqueues in one step (Queue.enqueue_many). Each job
-- goes through the steps of enqueue.lua (dedup by id and unique key, replace an
-- ended record, sequence number, group/pending/scheduled placement), in the
-- order given; a later job of the chunk sees the earlier ones (two jobs with one
-- unique key: the second is a duplicate).
-- All-or-nothing per chunk: the keys written are type-checked and the sequence's
-- room is checked for the whole chunk before the first write, so no command
-- of the script can fail half-way (Redis would keep the writes before it).
-- Jobs travel as one JSON argument, the reply as one JSON string: a few
-- thousand small arguments and reply items would cost more to pack and parse
-- on the client than the enqueues cost on the server.
-- Cheaper per job than enqueue.lua, same result: one HSET writes the whole
-- record (status included), the sequence is counted here and SET once, jobs
-- without a group go to pending/scheduled/deferred in one ZADD per chunk, and
-- idle workers are woken by one PUBLISH per chunk (a worker claims until the
-- queue is empty, whatever woke it). A job with a group takes make_ready's
-- path (the group's holder decides pending or the group's list).
-- KEYS[1] base
-- KEYS[2] (optional) the event stream <prefix>:events: a "queued" event per job
--   written is XADDed to it in this same step (the fields of events.make_event;
--   Queue passes it on a single Redis when its events go to that stream; a
--   Redis Cluster never: another slot. Without it the producer emits them).
-- ARGV[1] dedup_window
-- ARGV[2] JSON list, per job: [job_id, priority, mode (now|in|at|deferred), when,
--         unique_key, group, [field, value, ...], [dependency ref, ...] (mode
--         deferred only)]; the fields start with queue, name, func, ref.
-- ARGV[3..5] (with KEYS[2]) the stream's approximate MAXLEN, the host name and
--         the queue name of the events.
-- Returns a JSON list: per job placement, job_id, status, seq, scheduled_for
-- (seq '0' and scheduled_for '' for a duplicate), then the enqueue time last.
local base = KEYS[1]
local stream = KEYS[2]
local window = tonumber(ARGV[1]) or 0
local jobs = cjson.decode(ARGV[2])
local n = #jobs
local t = now()
local stamp = fmt_time(t)

-- the checks: nothing is written before they all pass
local gone = forgetting(base)   -- forget_queue deletes the queue (_lib.lua)
if gone then return redis.error_reply(gone) end
local bad = check_types(base)
if bad then return redis.error_reply(bad) end
for _, k in ipairs({base .. K.deferred, stream}) do
  local ty = key_type(k)
  if ty ~= 'none' and ty ~= (k == stream and 'stream' or 'zset') then
    return redis.error_reply('WRONGTYPE ' .. k .. ' holds a ' .. ty .. ': refused before any write')
  end
end
local seq0 = tonumber(redis.call('GET', base .. K.seq) or '0')
if seq0 + n >= SEQ_LIMIT then
  return redis.error_reply('queue sequence exhausted (2^42 enqueues)')
end

local event_time, maxlen, host, qname
if stream then
  event_time = iso_utc(t)
  maxlen, host, qname = ARGV[3], ARGV[4], ARGV[5]
end

-- score/member pairs, each ZADDed once at the end (nothing in this script reads
-- these sets; slices keep unpack() within Lua's stack)
local adds = {[K.pending] = {}, [K.scheduled] = {}, [K.deferred] = {}}
local readied = false   -- a job of this chunk made pending by make_ready (see the PUBLISH)
local function zadd_all(name, pairs_)
  for i = 1, #pairs_, 1000 do
    redis.call('ZADD', base .. name, unpack(pairs_, i, math.min(i + 999, #pairs_)))
  end
end

local out = {}
local seq = seq0
for i = 1, n do
  local job = jobs[i]
  local jid, prio, mode = job[1], tonumber(job[2]), job[3]
  local when, ukey, group, fields = tonumber(job[4]) or 0, job[5], job[6], job[7]
  local jkey = base .. K.job .. jid
  local front = false   -- the optional fields follow the six every job has (enqueue.py)
  for k = 13, #fields - 1, 2 do
    if fields[k] == F.at_front then front = true end
  end

  local exists = redis.call('EXISTS', jkey) == 1
  local dup, dupst = nil, nil
  if exists then
    dupst = live_status(base, jid, t, window)
    if dupst then dup = jid end
  end
  if not dup and ukey ~= '' then
    local other = redis.pcall('GET', base .. K.unique .. ukey)  -- a wrong type: no owner
    if type(other) == 'string' then
      dupst = live_status(base, other, t, window)
      if dupst then dup = other end
    end
  end

  if dup then
    out[#out + 1] = 'duplicate'; out[#out + 1] = dup; out[#out + 1] = dupst
    out[#out + 1] = '0'; out[#out + 1] = ''
  else
    if exists then  -- an ended record with the same id (or a stray key): replace it
      for _, reg in ipairs({K.failed, K.finished, K.canceled, K.scheduled, K.pending, K.started,
                            K.deferred}) do
        redis.call('ZREM', base .. reg, jid)
      end
      redis.call('DEL', jkey, base .. K.deps .. jid)
    end
    seq = seq + 1   -- SET once below: nobody else runs between two steps of a script
    local status, at = S.queued, nil
    if mode == 'deferred' then  -- waits on dependencies (job[8]: their refs), see workflows.py
      status = S.deferred
    elseif mode ~= 'now' then
      at = when
      if mode == 'in' then at = t + when end
      if at > t then status = S.scheduled else at = nil end
    end
    redis.call('HSET', jkey, F.id, jid, F.seq, fmt_int(seq), F.priority, fmt_int(prio),
      F.attempts, 0, F.enqueued_at, stamp, F.status, status, unpack(fields))
    if ukey ~= '' then redis.call('SET', base .. K.unique .. ukey, jid) end
    local sched = ''
    if status == S.deferred then
      local d = adds[K.deferred]
      d[#d + 1] = stamp; d[#d + 1] = jid
      redis.call('SADD', base .. K.deps .. jid, unpack(job[8]))
    elseif status == S.scheduled then
      sched = fmt_time(at)
      redis.call('HSET', jkey, F.scheduled_for, sched)
      local s = adds[K.scheduled]
      s[#s + 1] = sched; s[#s + 1] = jid
    elseif group ~= '' or front then   -- front: at_front, placed by push_pending
      if front and #adds[K.pending] > 0 then   -- ahead of this chunk's earlier jobs too
        zadd_all(K.pending, adds[K.pending])
        adds[K.pending] = {}
      end
      -- the group's holder decides: pending, or the group's list
      readied = make_ready(base, jid) or readied
    else
      local p = adds[K.pending]
      p[#p + 1] = fmt_int(prio * SEQ_LIMIT - seq); p[#p + 1] = jid
    end
    out[#out + 1] = status; out[#out + 1] = jid; out[#out + 1] = status
    out[#out + 1] = fmt_int(seq); out[#out + 1] = sched
    if stream then
      queued_event(base, stream, maxlen, event_time, jid, qname, fields[4], prio, host)
    end
  end
end
if seq > seq0 then redis.call('SET', base .. K.seq, fmt_int(seq)) end
for name, pairs_ in pairs(adds) do
  if #pairs_ > 0 then zadd_all(name, pairs_) end
end
-- readied: a job made pending by make_ready, whose own wake-up a job placed before it in
-- this chunk may have kept back (wake_if_first); scheduled: idle workers learn when
if #adds[K.pending] > 0 or readied or #adds[K.scheduled] > 0 then
  redis.call('PUBLISH', base .. K.wake, 'bulk')
end
out[#out + 1] = stamp
return cjson.encode(out)
