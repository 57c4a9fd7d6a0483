-- enqueue_many: a chunk of enqueues in one step (Queue.enqueue_many). Each job
-- goes through exactly the steps of enqueue.lua (dedup by id and unique key,
-- replace an ended record, sequence number, group/pending/scheduled
-- placement), in the order given; a later job of the chunk sees the earlier
-- ones (two jobs with one unique key: the second is a duplicate).
-- The whole chunk is one script, so it is all-or-nothing: the only error a job
-- could meet (sequence exhausted) is checked for the chunk before any write.
-- Jobs travel as one JSON argument, the reply as one JSON string: a few
-- thousand small arguments and reply items would cost more to pack and parse
-- on the client than the enqueues cost on the server.
-- KEYS[1] base
-- ARGV[1] dedup_window
-- ARGV[2] JSON list, per job: [job_id, priority, mode (now|in|at|deferred), when,
--         unique_key, [field, value, ...], [dependency ref, ...] (mode deferred only)]
-- Returns a JSON list: per job placement, job_id, status, seq, scheduled_for
-- (seq '0' and scheduled_for '' for a duplicate), then the enqueue time last.
local base = KEYS[1]
local window = tonumber(ARGV[1]) or 0
local jobs = cjson.decode(ARGV[2])
local n = #jobs
local t = now()

local seq0 = tonumber(redis.call('GET', base .. 'seq') or '0')
if seq0 + n >= SEQ_LIMIT then
  return redis.error_reply('queue sequence exhausted (2^42 enqueues)')
end

local out = {}
for i = 1, n do
  local job = jobs[i]
  local jid, prio, mode = job[1], tonumber(job[2]), job[3]
  local when, ukey, fields = tonumber(job[4]) or 0, job[5], job[6]

  local dup, dupst = nil, live_status(base, jid, t, window)
  if dupst then dup = jid end
  if not dup and ukey ~= '' then
    local other = redis.call('GET', base .. 'unique:' .. ukey)
    if other then
      dupst = live_status(base, other, t, window)
      if dupst then dup = other end
    end
  end

  if dup then
    out[#out + 1] = 'duplicate'; out[#out + 1] = dup; out[#out + 1] = dupst
    out[#out + 1] = '0'; out[#out + 1] = ''
  else
    local jkey = base .. 'job:' .. jid
    if redis.call('EXISTS', jkey) == 1 then
      for _, reg in ipairs({'failed', 'finished', 'canceled', 'scheduled', 'pending', 'started',
                            'deferred'}) do
        redis.call('ZREM', base .. reg, jid)
      end
      redis.call('DEL', jkey, base .. 'deps:' .. jid)
    end
    new_job(base, jid, prio, t, fields, 1)
    seq0 = seq0 + 1  -- new_job's INCR: nobody else runs between two steps of a script
    local seq = seq0
    if ukey ~= '' then redis.call('SET', base .. 'unique:' .. ukey, jid) end
    local placed, at = false, nil
    if mode == 'deferred' then  -- waits on dependencies (job[7]: their refs), see workflows.py
      redis.call('HSET', jkey, 'status', 'deferred')
      redis.call('ZADD', base .. 'deferred', fmt_time(t), jid)
      redis.call('SADD', base .. 'deps:' .. jid, unpack(job[7]))
      out[#out + 1] = 'deferred'; out[#out + 1] = jid; out[#out + 1] = 'deferred'
      out[#out + 1] = fmt_int(seq); out[#out + 1] = ''
      placed = true
    elseif mode ~= 'now' then
      at = when
      if mode == 'in' then at = t + when end
      if at > t then
        redis.call('HSET', jkey, 'status', 'scheduled', 'scheduled_for', fmt_time(at))
        redis.call('ZADD', base .. 'scheduled', fmt_time(at), jid)
        out[#out + 1] = 'scheduled'; out[#out + 1] = jid; out[#out + 1] = 'scheduled'
        out[#out + 1] = fmt_int(seq); out[#out + 1] = fmt_time(at)
        placed = true
      end
    end
    if not placed then
      make_ready(base, jid)
      out[#out + 1] = 'queued'; out[#out + 1] = jid; out[#out + 1] = 'queued'
      out[#out + 1] = fmt_int(seq); out[#out + 1] = ''
    end
  end
end
out[#out + 1] = fmt_time(t)
return cjson.encode(out)
