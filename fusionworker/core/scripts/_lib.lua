-- Shared helpers of every script, joined to each by fusionworker/core/scripts/__init__.py:
-- the script's text runs as a function whose first line is the chunk's first line (so
-- a Lua error names the script's own line), these helpers follow it, and every name
-- defined at the top here (no `local`: the loader declares them local, before the
-- script) is a local of the chunk, visible to the script.
-- Every script gets KEYS[1] = the queue's hash-tagged base "fw:{q}:" and touches
-- keys under that base only, so it runs on one Redis Cluster slot.
-- F.<field> is a job hash field (core/record.py), K.<key> a queue key after the base
-- (core/keys.py), S.<status> a job status and R.<reason> a failure reason
-- (core/vocabulary.py): the loader writes their strings in, so no script spells them.
SEQ_LIMIT = 4398046511104  -- 2^42; score = priority * 2^42 - seq (job.py)

function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- An exact integer score. '%.0f' formats through the C library's floating-point path,
-- several times the instructions of '%d', which writes the same text for a whole
-- number that a C long holds exactly (below 2^53 here; -0 keeps its sign as '%.0f' does).
function fmt_int(n)
  if n ~= 0 and n > -9007199254740992 and n < 9007199254740992 and n == math.floor(n) then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end
-- A time as the records hold it. A script formats its own clock `t` several times (a
-- claim once per job it takes): the last answer is kept, {t, text}.
FMT_LAST = {}
function fmt_time(t)
  if FMT_LAST[1] ~= t then FMT_LAST[1], FMT_LAST[2] = t, string.format('%.6f', t) end
  return FMT_LAST[2]
end
-- A lease deadline, the score of a job in `started`: `t` + `lease` seconds rounded up
-- to a whole second. Redis keeps a small ZSET (up to zset-max-listpack-entries, 128) as
-- a listpack, where a whole score is an integer and any other is text that every
-- ZADD parses again, member by member, to find its place: at 100 started jobs an
-- insertion and a removal took 53k instructions instead of 166k. A lease that ends up
-- to a second later only makes the reaper wait that much longer (docs/design.md).
function lease_end(t, lease) return fmt_int(math.ceil(t + lease)) end

-- A field of a hash, or nil (no key, no field, or a key that is not a hash:
-- a record of the wrong type reads as missing instead of failing the script
-- half-way through its writes).
function hget(key, field)
  local v = redis.pcall('HGET', key, field)
  if v == false or type(v) == 'table' then return nil end
  return v
end

-- Fields of a hash (a table, false for a missing field), or nil when the key holds
-- another type: read as hget does, so a refusal can come before any write.
function hmget(key, ...)
  local v = redis.pcall('HMGET', key, ...)
  if v.err then return nil end
  return v
end

-- A key of the wrong type for `want` (not missing): the refusal's error text, else nil.
function wrong_type(key, want)
  local ty = key_type(key)
  if ty ~= 'none' and ty ~= want then
    return 'WRONGTYPE ' .. key .. ' holds a ' .. ty .. ', not a ' .. want ..
      ': refused before any write'
  end
  return nil
end

-- Redis does not roll back a script's earlier writes when a later command fails
-- (WRONGTYPE on a key somebody overwrote by hand), so every script checks the
-- types of the keys it writes BEFORE its first write and refuses with an error
-- (nothing written) instead. Returns nil, or the error message.
KEY_TYPES = {[K.pending] = 'zset', [K.scheduled] = 'zset', [K.started] = 'zset',
  [K.failed] = 'zset', [K.finished] = 'zset', [K.canceled] = 'zset', [K.groups] = 'hash',
  [K.seq] = 'string'}
function key_type(key)
  local ty = redis.call('TYPE', key)
  if type(ty) == 'table' then ty = ty['ok'] end
  return ty
end
function check_types(base, jkey)
  for name, want in pairs(KEY_TYPES) do
    local ty = key_type(base .. name)
    if ty ~= 'none' and ty ~= want then
      return 'WRONGTYPE ' .. base .. name .. ' holds a ' .. ty .. ', not a ' .. want ..
        ': refused before any write'
    end
  end
  if jkey then
    local ty = key_type(jkey)
    if ty ~= 'none' and ty ~= 'hash' then
      return 'WRONGTYPE ' .. jkey .. ' holds a ' .. ty .. ', not a hash: refused before any write'
    end
  end
  return nil
end

-- Write a new job record: next FIFO sequence number, the caller's fields
-- (argv[first..], name/value pairs), then id/seq/priority/attempts/enqueued_at.
-- Placement (pending, group list, scheduled) is the caller's. Shared by
-- enqueue.lua and cron_tick.lua so a cron run is a job like any other.
-- Returns the job key, or nil and an error message.
function new_job(base, jid, prio, t, argv, first)
  local seq = redis.call('INCR', base .. K.seq)
  if seq >= SEQ_LIMIT then return nil, 'queue sequence exhausted (2^42 enqueues)' end
  local jkey = base .. K.job .. jid
  if #argv >= first then redis.call('HSET', jkey, unpack(argv, first)) end
  redis.call('HSET', jkey, F.id, jid, F.seq, seq, F.priority, prio, F.attempts, 0,
    F.enqueued_at, fmt_time(t))
  return jkey
end

-- Put a job id on the pending ZSET at its priority/FIFO score and wake idle workers.
function push_pending(base, jid)
  local jkey = base .. K.job .. jid
  local prio = tonumber(hget(jkey, F.priority) or '0') or 0
  local seq = tonumber(hget(jkey, F.seq) or '0') or 0
  if hget(jkey, F.at_front) then seq = front_seq(base, jkey, prio, seq) end
  redis.call('ZADD', base .. K.pending, fmt_int(prio * SEQ_LIMIT - seq), jid)
  redis.call('HSET', jkey, F.status, S.queued)
  wake_if_first(base, jid)
end

-- The refusal of an enqueue while forget_queue deletes the queue (its `forgetting`
-- key, set before its SCAN: a job written meanwhile would lose its record or its
-- place to the deletion, and its producer was told it was queued); nil otherwise.
function forgetting(base)
  if redis.call('EXISTS', base .. K.forgetting) == 0 then return nil end
  return 'QUEUEGONE queue ' .. string.match(base, '{(.*)}:$') .. ' is being deleted ' ..
    '(forget_queue, `queue delete`): refused before any write; enqueue again once ' ..
    'it is gone (a new, empty queue), or run the delete again if it was interrupted'
end

-- Wake idle workers when `pending` went from empty to one job, or the queue has a
-- setting that can keep jobs pending while a claim takes none (a concurrency cap, a
-- rate limit, group rate limits, a pause): a worker trusts a queue it found empty to
-- stay so until its channel speaks (runtime/claim.py, "quiet queues"), and a job added
-- to a plain queue that already held one finds every such worker woken by that earlier
-- job (docs/design.md, "One wake-up per empty-to-non-empty, not per job"). One message
-- per job would be read, and thrown away, by every subscribed worker.
function wake_if_first(base, jid)
  if redis.call('ZCARD', base .. K.pending) == 1 or redis.call('EXISTS',
      base .. K.max_active, base .. K.rate, base .. K.group_rate, base .. K.paused) > 0 then
    redis.call('PUBLISH', base .. K.wake, jid)
  end
end

-- at_front (Queue.enqueue(at_front=True)): the job goes one place ahead of every
-- pending job of its priority: its seq becomes the first one's minus one (zero or
-- below when needed, down to -2^41: the score stays under the next priority's jobs
-- while a queue's sequence is under 2^41), written to the record, so a retry comes
-- back to that place. With none pending it takes 0 (at most): ahead of every job
-- enqueued before it that becomes ready later (a sibling dependent released after
-- it by the same parent). The flag is used once (dropped here).
function front_seq(base, jkey, prio, seq)
  redis.call('HDEL', jkey, F.at_front)
  local top = redis.call('ZREVRANGEBYSCORE', base .. K.pending,
    fmt_int(prio * SEQ_LIMIT + SEQ_LIMIT / 2), '(' .. fmt_int(prio * SEQ_LIMIT - SEQ_LIMIT / 2),
    'LIMIT', 0, 1, 'WITHSCORES')
  local first = #top > 0 and (prio * SEQ_LIMIT - tonumber(top[2])) or 1
  local front = math.max(math.min(first - 1, seq), -SEQ_LIMIT / 2)
  redis.call('HSET', jkey, F.seq, fmt_int(front))
  return front
end

-- Hand group g to the next job waiting on its list (or free it when none waits).
function pass_group(base, group)
  while true do
    local nxt = redis.call('LPOP', base .. K.group .. group)
    if not nxt then
      redis.call('HDEL', base .. K.groups, group)
      return
    end
    if hget(base .. K.job .. nxt, F.status) == S.queued then
      redis.call('HSET', base .. K.groups, group, nxt)
      push_pending(base, nxt)
      return
    end
  end
end

-- A job of a group is runnable only while it holds the group: otherwise it
-- waits, in order, on the group's list. Returns true when it became pending.
-- A holder whose record vanished (evicted, deleted by hand) cannot release the
-- group any more: the group passes on here instead of blocking forever.
function make_ready(base, jid)
  local jkey = base .. K.job .. jid
  local group = hget(jkey, F.group)
  if group and group ~= '' then
    local holder = hget(base .. K.groups, group)
    if holder and holder ~= jid then
      redis.call('RPUSH', base .. K.group .. group, jid)
      redis.call('HSET', jkey, F.status, S.queued)
      if redis.call('EXISTS', base .. K.job .. holder) == 0 then
        pass_group(base, group)
        return hget(base .. K.groups, group) == jid
      end
      return false
    end
    redis.call('HSET', base .. K.groups, group, jid)
  end
  push_pending(base, jid)
  return true
end

-- The job ended for good (finished, failed, canceled, deleted): hand its group
-- to the next waiting job of that group, if it held it.
function release_group(base, jid)
  local group = hget(base .. K.job .. jid, F.group)
  if not group or group == '' then return end
  if hget(base .. K.groups, group) ~= jid then return end
  pass_group(base, group)
end

function drop_unique(base, jid)
  local ukey = hget(base .. K.job .. jid, F.unique_key)
  if ukey and ukey ~= '' and hget(base .. K.job .. jid, F.id) then
    local k = base .. K.unique .. ukey
    if redis.call('GET', k) == jid then redis.call('DEL', k) end
  end
end

function prune(zkey, cutoff)
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', '(' .. fmt_time(cutoff))
end

-- Dependencies (fusionworker/core/workflows.py): job jid ended for good with `outcome`
-- (finished | failed | canceled). Each job waiting on it gets a note in this queue's
-- outbox; a worker or the reaper replays the note to the dependent's queue
-- (dep_done.lua, idempotent), then removes it. `kind`: the callback's outcome when it
-- is not `outcome` ('stopped': a failure for the dependents, on_stopped's callback).
function notify_dependents(base, jid, outcome, kind)
  local dkey = base .. K.dependents .. jid
  local refs = redis.call('SMEMBERS', dkey)
  for _, ref in ipairs(refs) do
    redis.call('RPUSH', base .. K.outbox, cjson.encode({outcome, ref, jid}))
  end
  if #refs > 0 then redis.call('DEL', dkey) end
  -- batches (fusionworker/core/batch.py): the same outbox carries "job of batch B ended"
  local batch = hget(base .. K.job .. jid, F.batch)
  if batch and batch ~= '' then
    redis.call('RPUSH', base .. K.outbox, cjson.encode({'batch:' .. outcome, batch, jid}))
  end
  -- per-job callbacks (enqueue(on_success=, on_failure=)): the note names the function,
  -- the replay enqueues it (the record may be gone by then: result_ttl=0)
  kind = kind or outcome
  local field = (kind == S.finished and F.on_success) or (kind == S.failed and F.on_failure)
    or (kind == S.stopped and F.on_stopped)
  local cb = field and hget(base .. K.job .. jid, field)
  if cb and cb ~= '' then
    local note = {'callback:' .. kind, string.match(base, '{(.*)}:$') .. ':' .. jid, jid, cb}
    -- a life after a requeue: its own callback (workflows.py names it <id>:<kind>:<life>)
    local requeues = tonumber(hget(base .. K.job .. jid, F.requeues) or '0') or 0
    if requeues > 0 then note[5] = requeues + 1 end
    redis.call('RPUSH', base .. K.outbox, cjson.encode(note))
  end
end

-- Move a job to the failed registry (dead-letter) with retention failed_ttl.
-- The record's own failure_ttl field, when set, wins for the record (-1: kept); the
-- registry is pruned by failed_ttl. `status`: 'stopped' for a stopped job (RQ keeps
-- those in its failed registry too), else 'failed'.
function to_failed(base, jid, t, failed_ttl, status)
  local jkey = base .. K.job .. jid
  local keep = tonumber(hget(jkey, F.failure_ttl)) or failed_ttl
  -- the token blanked in the same HSET (finish.lua says why that reads as gone)
  redis.call('HSET', jkey, F.status, status or S.failed, F.ended_at, fmt_time(t), F.token, '')
  redis.call('ZADD', base .. K.failed, fmt_time(t), jid)
  if keep > 0 then redis.call('EXPIRE', jkey, keep) end
  drop_unique(base, jid)
  release_group(base, jid)
  notify_dependents(base, jid, S.failed, status)
  if failed_ttl > 0 then prune(base .. K.failed, t - failed_ttl) end
  redis.call('PUBLISH', base .. K.done .. jid, S.failed)   -- Job.wait
end

-- Promote due scheduled jobs (delays, retry backoff) to pending; exactly once,
-- since this runs inside a script: `due` are ids read from `scheduled` (due now).
function promote(base, due)
  for _, jid in ipairs(due) do
    redis.call('ZREM', base .. K.scheduled, jid)
    if hget(base .. K.job .. jid, F.status) == S.scheduled then make_ready(base, jid) end
  end
end

-- Is this job a live duplicate (queued/scheduled/started, or finished within window)?
function live_status(base, jid, t, window)
  local jkey = base .. K.job .. jid
  local st = hget(jkey, F.status)
  if not st then return nil end
  if st == S.queued or st == S.scheduled or st == S.started or st == S.deferred or st == S.held then
    return st
  end
  if st == S.finished and t - (tonumber(hget(jkey, F.ended_at) or '0') or 0) < window then
    return st
  end
  return nil
end

-- "2024-05-01T12:00:00.123Z" of `t` (now()'s seconds): events.make_event's @timestamp
-- (UTC, milliseconds truncated), by the days-to-civil-date algorithm. TIME's
-- microseconds come back whole from the float (its error is under a nanosecond).
-- Integer division spelled (a - a % b) / b, exact on whole numbers: Lua's arithmetic,
-- where math.floor is a C call; the text written by one string.char of its 24 bytes,
-- where string.format with 7 integers costs as much as the rest (a 4-digit year; any
-- other goes through string.format). A script formats its own clock once per step
-- (a claim's events share it): the last answer is kept, {t, text}.
ISO_LAST = {}
function iso_utc(t)
  if ISO_LAST[1] == t then return ISO_LAST[2] end
  local secs = t - t % 1
  local us = (t - secs) * 1000000 + 0.5
  us = us - us % 1
  if us >= 1000000 then secs, us = secs + 1, us - 1000000 end
  local ms = (us - us % 1000) / 1000
  local rest = secs % 86400
  local z = (secs - rest) / 86400 + 719468
  local doe = z % 146097
  local era = (z - doe) / 146097
  local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524
    - (doe - doe % 146096) / 146096
  yoe = (yoe - yoe % 365) / 365
  local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
  local mp = 5 * doy + 2
  mp = (mp - mp % 153) / 153
  local day = 153 * mp + 2
  day = doy - (day - day % 5) / 5 + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  local s = rest % 60
  local m = (rest - s) % 3600 / 60
  local h = (rest - rest % 3600) / 3600
  local text
  if year < 1000 or year > 9999 then
    text = string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day, h, m, s, ms)
  else
    local y, mo, d, hh, mi, ss, ml = year % 10, month % 10, day % 10, h % 10, m % 10,
      s % 10, ms % 10
    local y2, m2 = year % 100, ms % 100
    local y3 = year % 1000
    text = string.char(48 + (year - y3) / 1000, 48 + (y3 - y2) / 100, 48 + (y2 - y) / 10,
      48 + y, 45, 48 + (month - mo) / 10, 48 + mo, 45, 48 + (day - d) / 10, 48 + d, 84,
      48 + (h - hh) / 10, 48 + hh, 58, 48 + (m - mi) / 10, 48 + mi, 58,
      48 + (s - ss) / 10, 48 + ss, 46, 48 + (ms - m2) / 100, 48 + (m2 - ml) / 10, 48 + ml, 90)
  end
  ISO_LAST[1], ISO_LAST[2] = t, text
  return text
end

-- A job's history: its events as {stream id, document} in JSON, the newest HISTORY_CAP
-- kept. A new history lives HISTORY_TTL seconds; an event that ends or revives the job
-- (`copy`) gives it the record's TTL, which the writing script set before (none while
-- the record has none, HISTORY_GONE_TTL seconds once it is gone). The constants are
-- those of events/history.py (a test holds them equal).
HISTORY_CAP = 200
HISTORY_TTL = 30 * 86400
HISTORY_GONE_TTL = 600

-- One event document: XADDed to `stream` (approximate MAXLEN; nil: no stream, a
-- Cluster's history.lua) and pushed, with its stream id ('' without), to the job's
-- history `hist` (`jkey`: the job's record). `ev` is the document's name/value pairs in
-- order, @timestamp first, each value text, none nil (as the sink writes them).
-- Returns the stream id.
function put_event(stream, maxlen, hist, jkey, ev, copy)
  local id = stream and redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(ev)) or ''
  local doc = {}
  for k = 1, #ev, 2 do doc[ev[k]] = ev[k + 1] end
  local n = redis.call('RPUSH', hist, cjson.encode({id, doc}))
  if n > HISTORY_CAP then redis.call('LTRIM', hist, -HISTORY_CAP, -1) end
  if copy then
    local left = redis.call('TTL', jkey)
    if left == -2 then
      redis.call('EXPIRE', hist, HISTORY_GONE_TTL)
    elseif left == -1 then
      redis.call('PERSIST', hist)
    else
      redis.call('EXPIRE', hist, left)
    end
  elseif n == 1 then
    redis.call('EXPIRE', hist, HISTORY_TTL)
  end
  return id
end

-- The "queued" event of a new job, as the producer's sink would write it. `stamp` is
-- iso_utc of the enqueue time (make_event's @timestamp). The caller checked the
-- stream's type before its first write; the history of a new job is new.
function queued_event(base, stream, maxlen, stamp, jid, qname, func, prio, host)
  put_event(stream, maxlen, base .. K.job_events .. jid, base .. K.job .. jid,
    {'@timestamp', stamp, 'event', 'queued', 'job_id', jid,
    'queue', qname, 'function', func, 'priority', fmt_int(prio), 'attempt', '0', 'host', host},
    false)
end

-- An event the worker's scripts write in the step that makes it true (claim.lua:
-- processing, finish.lua: the outcome, progress.lua: progress), when the worker's event
-- log is the plain stream sink on this Redis (docs/design.md, "Events written by the
-- scripts"). `ev`: the document's pairs after @timestamp, which is iso_utc of `t` (this
-- server's clock, as the step's own times). Under pcall: a stream or history key of
-- another type loses the event (the error is returned), never the step's writes.
function job_event(base, jid, stream, maxlen, t, ev, copy)
  local doc = {'@timestamp', iso_utc(t), unpack(ev)}
  local ok, err = pcall(put_event, stream, maxlen, base .. K.job_events .. jid,
    base .. K.job .. jid, doc, copy)
  if not ok then
    local why = type(err) == 'table' and err.err or tostring(err)
    redis.log(redis.LOG_WARNING, 'fusionworker: the ' .. ev[2] .. ' event of job ' .. jid ..
      ' was not written: ' .. why)
    return why
  end
  return nil
end

-- The event block of finish.lua and progress.lua, in ARGV from `at`: '' (no event), or
-- the stream's MAXLEN, 'copy' | 'keep' (put_event's `copy`), the count k of items,
-- then k items (the document's pairs after @timestamp). Returns the block (nil: none)
-- and the index of the first ARGV after it.
function event_block(at)
  if (ARGV[at] or '') == '' then return nil, at + 1 end
  local k = tonumber(ARGV[at + 2])
  return {maxlen = ARGV[at], copy = ARGV[at + 1] == 'copy', ev = {unpack(ARGV, at + 3, at + 2 + k)}},
    at + 3 + k
end

-- A float as Python's repr writes it (the shortest text that reads back as the same
-- number, ".0" on a whole one): what the sink writes of make_event's float fields.
-- Exact below 1e15 (%g writes an exponent from there, repr from 1e16): the waits it
-- writes are seconds.
function py_float(x)
  local s
  for _, p in ipairs({'%.15g', '%.16g', '%.17g'}) do
    s = string.format(p, x)
    if tonumber(s) == x then break end
  end
  if not string.find(s, '[%.eni]') then s = s .. '.0' end
  return s
end
