-- claim: the atomic take (invariant 1). Promotes due scheduled jobs, honours
-- pause and the concurrency cap, pops the best pending job and records it as
-- started with a lease deadline and a fresh attempt token, in one round trip.
-- There is no moment when a claimed job is in no structure.
-- KEYS[1] base; KEYS[2] (optional) the event stream <prefix>:events
-- ARGV: worker_name, token, lease_seconds, failed_ttl[, count ('' for one)[, the stream's
--       MAXLEN, the worker's host, the queue's name]] (the last three with KEYS[2])
-- With KEYS[2] each job taken gets its "processing" event here (processing_event).
-- Returns {'job', now, {hash...}, job_id[, why its event was lost]} |
--         {'empty', next_scheduled_score, now} |
--         {'paused'} | {'capped'} | {'missing', job_id} | {'limited', next_allowed_time, now}
-- (now: this server's clock, so the worker can sleep until the next time without a TIME)
-- With count (a worker with free slots, --concurrency): up to count jobs, each
-- taken exactly as a single claim would (priority/FIFO order, the cap and the
-- rate limit checked before each one); their tokens are token .. ':' .. i
-- (i = 1, 2, ...). Returns {'job', now, {{hash...}, job_id[, why]} | missing_id, ...}
-- when it took at least one, else the single claim's answers (a queue entry
-- without a record is dead-lettered and named by its id in place of a pair).
-- When it took fewer than count because the rate limit refused (or only jobs
-- scheduled for later are left), a last item {'limited' | 'empty', time} says
-- when to claim again, as the single answers do; stopped by the concurrency cap, a
-- last item {'capped'} says so (the worker never takes that queue for quiet).
-- Per-group rate limits (fw:{q}:group_rate, docs/design.md): a job whose group's
-- window is full is set aside until its slot opens, and the next job is taken.
local base = KEYS[1]
local t = now()
-- The queue's settings and its `scheduled` set: the usual queue has none of them (no
-- group rate limits, not paused, no concurrency cap, no rate limit, no delayed job or
-- retry waiting): one EXISTS of the five keys says so. Otherwise the first entry of
-- `scheduled` (a ZSET without members does not exist) tells it from the settings
-- (EXISTS counts the keys that exist); a queue with settings reads each, as below, and
-- only a first entry that is due makes the claim read the due ones.
local settings = {base .. K.group_rate, base .. K.paused, base .. K.max_active, base .. K.rate}
local present = redis.call('EXISTS', base .. K.scheduled, unpack(settings))
-- `first`: {id, score} of the earliest scheduled job, or {}, as long as this claim has
-- not changed `scheduled` (promote, park: then nil, read again when needed)
local first = present > 0 and redis.call('ZRANGE', base .. K.scheduled, 0, 0, 'WITHSCORES') or {}
local flags = present > (first[1] and 1 or 0)
local group_rates = flags and redis.call('EXISTS', base .. K.group_rate) == 1
local count = tonumber(ARGV[5] or '')
local due = {}
local first_at = first[2] and tonumber(first[2])
if first[2] and not (first_at and first_at > tonumber(fmt_time(t))) then   -- one is due
  due = redis.call('ZRANGEBYSCORE', base .. K.scheduled, '-inf', fmt_time(t), 'LIMIT', 0,
    math.max(100, count or 1))
  first = nil
end
-- Nothing is half-written on a refusal. Promoting due jobs and parking jobs of a
-- rate-limited group write many keys: then every key is checked before the first
-- write. Otherwise a claim writes `started` first (failing, it wrote nothing), then
-- keys it has read (`pending`, the job hash, the rate hash and log); a queue entry
-- without a usable record checks `failed` before it is dead-lettered. A queue without
-- settings pops its best job (ZPOPMAX, the first write) and puts it back at its score
-- when `started` or `failed` then refuses (take_plain).
if #due > 0 or group_rates then
  local bad = check_types(base)
  if bad then return redis.error_reply(bad) end
end
if group_rates then  -- the per-group keys written below, checked before any write too
  for k, want in pairs({[K.group_rate] = 'hash', [K.group_rate_held] = 'hash',
                        [K.group_rate_parked] = 'zset'}) do
    local ty = key_type(base .. k)
    if ty ~= 'none' and ty ~= want then
      return redis.error_reply('WRONGTYPE ' .. base .. k .. ' holds a ' .. ty ..
        ': refused before any write')
    end
  end
end
promote(base, due)
if flags and redis.call('EXISTS', base .. K.paused) == 1 then return {'paused'} end
local cap = flags and redis.call('GET', base .. K.max_active)
if cap then cap = tonumber(cap) end

-- Nothing pending. Jobs set aside by their group's rate limit (see park) are jobs
-- ready, not an empty queue: answered 'limited' (a burst worker waits for them)
-- with the earliest scheduled time, when the first of them is due again.
local function nothing_pending()
  local nxt = first or redis.call('ZRANGE', base .. K.scheduled, 0, 0, 'WITHSCORES')
  if group_rates and nxt[2] then
    local parked = base .. K.group_rate_parked
    redis.call('ZREMRANGEBYSCORE', parked, '-inf', fmt_time(t))
    if redis.call('ZCARD', parked) > 0 then return {'limited', nxt[2], fmt_time(t)} end
  end
  return {'empty', nxt[2] or '', fmt_time(t)}
end

-- Per-group rate limit of job jid's group: the limit of that group ('group:' .. g)
-- or of every group ('every'), "N W" (N starts in any W seconds, a sliding-window
-- log per group, as the queue's own). Returns the time the group's next slot
-- opens when its window is full; else nil and, for a limited group, its log key
-- and window (the start is logged there once the job is taken).
local function group_slot(jid)
  local g = hget(base .. K.job .. jid, F.group)
  if not g or g == '' then return nil end
  local spec = redis.call('HMGET', base .. K.group_rate, 'group:' .. g, 'every')
  spec = spec[1] or spec[2]
  if not spec then return nil end
  local limit, window = string.match(spec, '^(%S+) (%S+)$')
  limit, window = tonumber(limit), tonumber(window)
  if not limit or not window then return nil end  -- not ours (written by hand): no limit
  local glog = base .. K.group_rate_log .. g
  local ty = key_type(glog)
  if ty ~= 'none' and ty ~= 'zset' then return nil end  -- not ours (written by hand)
  redis.call('ZREMRANGEBYSCORE', glog, '-inf', fmt_time(t - window))
  if redis.call('ZCARD', glog) >= limit then
    local oldest = redis.call('ZRANGE', glog, 0, 0, 'WITHSCORES')
    return tonumber(oldest[2]) + window
  end
  return nil, glog, window
end

-- Set job jid aside until `slot`: to `scheduled`, as a retry's backoff is, so it
-- keeps its group and promote() makes it pending again at the slot (a worker
-- sleeps until the earliest scheduled time). It is the group's only job in pending
-- (groups run one job at a time), so the group holds no other job back, and the
-- loop in take() parks each limited group at most once per claim.
local function park(jid, slot)
  local at = fmt_time(slot)
  redis.call('ZREM', base .. K.pending, jid)
  redis.call('ZADD', base .. K.scheduled, at, jid)
  first = nil
  redis.call('HSET', base .. K.job .. jid, F.status, S.scheduled, F.scheduled_for, at)
  redis.call('ZADD', base .. K.group_rate_parked, at, jid)
  redis.call('HINCRBYFLOAT', base .. K.group_rate_held, 'held_seconds', fmt_time(slot - t))
  redis.call('HINCRBY', base .. K.group_rate_held, 'held_jobs', 1)
end

-- A queue entry without a usable record (no record, or a key of the wrong type where
-- it should be): dead-lettered, named by its id. `failed` is checked first: of the
-- wrong type, the refusal ({'refused', why}) writes nothing; `restore` (the plain
-- take's) puts the popped entry back first.
local function dead_letter(jid, jkey, rec, restore)
  local bad = wrong_type(base .. K.failed, 'zset')
  if bad then
    if restore then restore() end
    return {'refused', bad}
  end
  redis.call('ZREM', base .. K.pending, jid)
  if rec.err then  -- leave the key
    redis.call('ZADD', base .. K.failed, fmt_time(t), jid)
    return {'missing', jid}
  end
  -- garbage in the queue: an id without a record. Dead-letter it, say why.
  redis.call('HSET', jkey, F.id, jid, F.error_type, 'MalformedJob',
    F.error_message, 'queue entry has no job record', F.failure_reason, R.malformed)
  to_failed(base, jid, t, tonumber(ARGV[4]))
  return {'missing', jid}
end

-- The job's "processing" event, as the worker's event log would emit it after the claim
-- (events/middleware.py), written in the step that starts the job (job_event, _lib.lua:
-- under pcall, it never refuses the claim). `rec`: the record as started.
-- a number a record's time field holds as Job.from_hash reads it (record.py): finite, or nil
local function finite(v)
  local n = tonumber(v or '')
  if n and n == n and n ~= math.huge and n ~= -math.huge then return n end
  return nil
end

local function processing_event(jid, rec, stamp)
  local func, prio, attempt, since, due
  for i = 1, #rec - 1, 2 do   -- one pass over the record for the five fields read
    local k = rec[i]
    if k == F.func then func = rec[i + 1]
    elseif k == F.priority then prio = rec[i + 1]
    elseif k == F.attempts then attempt = rec[i + 1]
    elseif k == F.enqueued_at then since = rec[i + 1]
    elseif k == F.scheduled_for then due = rec[i + 1] end
  end
  -- read as Job.from_hash reads them (record.py): an integer or 0, a finite number or none
  prio = string.match(prio or '', '^%s*([-+]?%d+)%s*$')
  local wait   -- Job.wait_time: from enqueue or due
  since = finite(since)
  if since then
    due = finite(due)
    if due and due > since then since = due end
    wait = tonumber(stamp) - since
    wait = py_float(wait > 0 and wait or 0)
  end
  -- one table, made at its size (the attempt is always there: mark_started wrote it)
  local ev = {'event', 'processing', 'job_id', jid, 'queue', ARGV[8], 'function', func or '',
    'priority', prio and fmt_int(tonumber(prio)) or '0', 'attempt', attempt, 'worker', ARGV[1],
    'host', ARGV[7], 'wait_time', wait or ''}
  if not wait then ev[18], ev[17] = nil, nil end
  if not func then
    table.remove(ev, 8)
    table.remove(ev, 7)
  end
  return job_event(base, jid, KEYS[2], ARGV[6], t, ev, false)
end

-- The job's record says it started: one HSET; the answer is the record as HGETALL
-- would read it after that write (one read, not two).
local function mark_started(jid, jkey, rec, token, stamp)
  local set = {[F.attempts] = 1, [F.status] = S.started, [F.started_at] = stamp,
               [F.worker_name] = ARGV[1], [F.token] = token}
  for i = 1, #rec - 1, 2 do
    if rec[i] == F.attempts then set[F.attempts] = (tonumber(rec[i + 1]) or 0) + 1 end
  end
  set[F.attempts] = fmt_int(set[F.attempts])
  local attempts = set[F.attempts]
  for i = 1, #rec - 1, 2 do
    local v = set[rec[i]]
    if v then
      rec[i + 1] = v
      set[rec[i]] = nil
    end
  end
  for _, k in ipairs({F.attempts, F.started_at, F.worker_name, F.token, F.status}) do
    if set[k] then
      rec[#rec + 1] = k
      rec[#rec + 1] = set[k]
    end
  end
  redis.call('HSET', jkey, F.attempts, attempts, F.status, S.started,
    F.started_at, stamp, F.worker_name, ARGV[1], F.token, token)
  -- why the processing event was not written (a key of another type), last: nil, none
  return {'job', stamp, rec, jid, KEYS[2] and processing_event(jid, rec, stamp) or nil}
end

-- A job with a `ttl` field not started within ttl seconds of becoming ready (enqueue,
-- or the end of its delay) is canceled here, reason 'expired', instead of taken: it
-- never runs. Kept like a failure (its failure_ttl, else ARGV[4]).
local expired_n = 0
local function expired(rec)
  local f = {}
  for i = 1, #rec - 1, 2 do f[rec[i]] = rec[i + 1] end
  local ttl = tonumber(f[F.ttl] or '')
  if not ttl or ttl <= 0 then return nil end
  local since = math.max(tonumber(f[F.enqueued_at] or '') or t, tonumber(f[F.scheduled_for] or '') or 0)
  if t <= since + ttl then return nil end
  return tonumber(f[F.failure_ttl] or '') or tonumber(ARGV[4])
end
-- nil: not expired (take it); true: canceled as expired (take the next one); else the
-- answer: a refusal (`restore` first, for the plain take), or after 100 expired jobs
-- in one call, "due now" (a bounded step: the worker claims again)
local function drop_expired(jid, jkey, rec, restore)
  local keep = expired(rec)
  if not keep then return nil end
  local bad = check_types(base) or wrong_type(base .. K.outbox, 'list')
  if bad then
    if restore then restore() end
    return {'refused', bad}
  end
  redis.call('ZREM', base .. K.pending, jid)
  redis.call('HSET', jkey, F.status, S.canceled, F.failure_reason, R.expired,
    F.ended_at, fmt_time(t), F.error_message, 'not started within its ttl')
  redis.call('ZADD', base .. K.canceled, fmt_time(t), jid)
  drop_unique(base, jid)
  release_group(base, jid)
  notify_dependents(base, jid, S.canceled)
  redis.call('PUBLISH', base .. K.done .. jid, S.canceled)   -- Job.wait
  if keep > 0 then redis.call('EXPIRE', jkey, keep) end
  expired_n = expired_n + 1
  if expired_n >= 100 then return {'empty', fmt_time(t), fmt_time(t)} end
  return true
end

-- The take of a queue without settings (flags false: no cap, rate or group limits):
-- ZPOPMAX takes the best job (the first write: failing, nothing is written); a
-- refusal after it (`started` or `failed` of the wrong type) puts the entry back at
-- its score first, so nothing is left written.
local function take_plain(token)
  local popped = redis.call('ZPOPMAX', base .. K.pending)
  if #popped == 0 then return nothing_pending() end
  local jid, score = popped[1], popped[2]
  local function restore() redis.call('ZADD', base .. K.pending, score, jid) end
  local jkey = base .. K.job .. jid
  local rec = redis.pcall('HGETALL', jkey)
  if rec.err or #rec == 0 then return dead_letter(jid, jkey, rec, restore) end
  local gone = drop_expired(jid, jkey, rec, restore)
  if gone == true then return take_plain(token) elseif gone then return gone end
  local stamp = fmt_time(t)
  local added = redis.pcall('ZADD', base .. K.started, lease_end(t, tonumber(ARGV[3])), jid)
  if type(added) == 'table' then
    restore()
    return {'refused', wrong_type(base .. K.started, 'zset') or added.err}
  end
  return mark_started(jid, jkey, rec, token, stamp)
end

local function take(token)
  if cap and redis.call('ZCARD', base .. K.started) >= cap then return {'capped'} end
  if not flags then return take_plain(token) end
  local ids = redis.call('ZREVRANGE', base .. K.pending, 0, 0)
  if #ids == 0 then return nothing_pending() end
  -- rate limit (sliding-window log, docs/design.md): at most `limit` starts in any
  -- `window` seconds, by this server's clock; refused -> {'limited', when the oldest
  -- start leaves the window}. Only a queue with pending jobs is held.
  local rate = redis.call('HMGET', base .. K.rate, 'limit', 'window')
  if rate[1] then
    local rlog, window = base .. K.rate_log, tonumber(rate[2])
    redis.call('ZREMRANGEBYSCORE', rlog, '-inf', fmt_time(t - window))
    if redis.call('ZCARD', rlog) >= tonumber(rate[1]) then
      redis.call('HSETNX', base .. K.rate, 'held_since', fmt_time(t))
      local oldest = redis.call('ZRANGE', rlog, 0, 0, 'WITHSCORES')
      return {'limited', fmt_time(tonumber(oldest[2]) + window), fmt_time(t)}
    end
  end

  local jid = ids[1]
  local glog, gwindow
  while group_rates do  -- the best job whose group (if limited) has room
    local slot
    slot, glog, gwindow = group_slot(jid)
    if not slot then break end
    park(jid, slot)
    ids = redis.call('ZREVRANGE', base .. K.pending, 0, 0)
    if #ids == 0 then return nothing_pending() end
    jid = ids[1]
  end
  local jkey = base .. K.job .. jid
  local rec = redis.pcall('HGETALL', jkey)
  if rec.err or #rec == 0 then return dead_letter(jid, jkey, rec) end
  local gone = drop_expired(jid, jkey, rec)
  if gone == true then return take(token) elseif gone then return gone end
  local stamp = fmt_time(t)
  redis.call('ZADD', base .. K.started, lease_end(t, tonumber(ARGV[3])), jid)
  redis.call('ZREM', base .. K.pending, jid)
  if rate[1] then  -- this start takes a place in the rate window
    local window = tonumber(rate[2])
    redis.call('ZADD', base .. K.rate_log, stamp, token)
    redis.call('PEXPIRE', base .. K.rate_log, math.ceil(window * 1000) + 1000)
    local held = hget(base .. K.rate, 'held_since')
    if held then
      redis.call('HINCRBYFLOAT', base .. K.rate, 'held_seconds', fmt_time(t - tonumber(held)))
      redis.call('HDEL', base .. K.rate, 'held_since')
    end
  end
  if glog then  -- this start takes a place in its group's window
    redis.call('ZADD', glog, stamp, token)
    redis.call('PEXPIRE', glog, math.ceil(gwindow * 1000) + 1000)
  end
  return mark_started(jid, jkey, rec, token, stamp)
end

if not count then
  local one = take(ARGV[2])
  if one[1] == 'refused' then return redis.error_reply(one[2]) end
  return one
end
local out = {'job', fmt_time(t)}
local last
for i = 1, count do
  last = take(ARGV[2] .. ':' .. i)
  if last[1] == 'refused' then
    -- nothing of this take written: an error when it was the first, else the jobs taken
    if #out == 2 then return redis.error_reply(last[2]) end
    break
  elseif last[1] == 'job' then
    out[#out + 1] = {last[3], last[4], last[5]}
  elseif last[1] == 'missing' then
    out[#out + 1] = last[2]
  else
    break
  end
end
if #out > 2 then
  if last[1] == 'limited' or (last[1] == 'empty' and last[2] ~= '') then
    out[#out + 1] = {last[1], last[2]}
  elseif last[1] == 'capped' then   -- jobs stay pending: the worker keeps the queue loud
    out[#out + 1] = {'capped'}
  end
  return out
end
return last
