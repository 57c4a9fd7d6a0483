-- finish: record an attempt's outcome, fenced by its token (invariant 7): a late
-- outcome of an attempt the reaper already took back is refused ('stale').
-- KEYS[1] base; KEYS[2] (optional) the event stream <prefix>:events
-- ARGV: job_id, token, outcome (finished|retry|failed|stopped), result_ttl, failed_ttl (the
--       worker's settings: `failed` is pruned by failed_ttl here, `finished` by
--       result_ttl in minutes.lua; the record's own result_ttl / failure_ttl fields,
--       when set, say how long the record is kept),
--       retry_delay, dedup_window, the outcome's event block (event_block, _lib.lua:
--       '' without KEYS[2]), then field, value, ...
-- Returns {'ok', outcome, server time[, why the event was lost]} | {'stale'}
-- The outcome's event (completed, failed, retry...) is written last, after the record's
-- TTL, under pcall (job_event): it never refuses or undoes the outcome.
-- Nothing is half-written on a refusal: every read comes first (one HMGET for the
-- fence and what the outcome needs, SMEMBERS of the waiting jobs when it has some). A job finished
-- or retried without a group: the outcome's registry (`finished` or `scheduled`)
-- takes the first write (ZADD NX: failing, it wrote nothing), then `started` (ZREM
-- under pcall: failing, the ZADD is undone and nothing is left written), then the
-- job hash (read). A job with a group, waiting jobs or a batch, and a failure,
-- check the keys of their own paths (TYPE) before the first write, as before.
local base = KEYS[1]
local jid, token, outcome = ARGV[1], ARGV[2], ARGV[3]
-- stopped (stop.lua, the horse killed): a failure whose status is 'stopped', no retry,
-- its on_stopped callback instead of on_failure
local stopped = outcome == S.stopped
if stopped then outcome = S.failed end
local result_ttl, failed_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local delay, window = tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local jkey = base .. K.job .. jid
local event, fa = event_block(8)   -- fa: the first of the outcome's fields
local ERROR_FIELDS = {F.error_type, F.error_message, F.not_retried, F.traceback,
  F.failure_reason}
-- the outcome's fields (ARGV[fa..], name/value pairs) name an error field
local function gives_error_fields()
  for i = fa, #ARGV - 1, 2 do
    for _, name in ipairs(ERROR_FIELDS) do
      if ARGV[i] == name then return true end
    end
  end
  return false
end
local rec = hmget(jkey, F.token, F.unique_key, F.group, F.batch, F.result_ttl, F.on_success,
  F.on_failure, F.has_dependents, F.waited, F.status, unpack(ERROR_FIELDS))   -- 11 to 15
-- the fence; an ended record's token is blanked (''), never a live attempt's (claim.lua)
if not rec or token == '' or rec[1] ~= token or rec[10] ~= S.started then return {'stale'} end
local ukey, group, batch = rec[2], rec[3], rec[4]
local keep = tonumber(rec[5]) or result_ttl   -- the job's own result_ttl wins
-- notify_dependents (_lib.lua) writes the outbox: waiting jobs, a batch, a callback
local cb = (outcome == S.finished and rec[6]) or (outcome == S.failed and rec[7])
if stopped then cb = hget(jkey, F.on_stopped) end
local notify = (batch and batch ~= '') or (cb and cb ~= '')
-- the waiting jobs: dep_register.lua adds one to `dependents:<id>` and flags the record
-- `has_dependents` in the same step (nothing removes the flag while the set lives), so
-- a record without the flag has none to read
local dependents = rec[8] == '1' and redis.call('SMEMBERS', base .. K.dependents .. jid) or {}
local bad
local checked = outcome == S.failed or (group and group ~= '')
if checked then
  bad = check_types(base)            -- the paths of to_failed and release_group
end
if not bad and (#dependents > 0 or notify) then
  bad = wrong_type(base .. K.outbox, 'list')
end
if bad then return redis.error_reply(bad) end
local t = now()
-- the registry of a finished (kept) or retried job, when no check above vouched for it:
-- its ZADD is the first write, `started` the second, undone on a failure of the second
local registry, score
if not checked then
  if outcome == 'retry' then
    registry, score = base .. K.scheduled, fmt_time(t + delay)
  elseif keep ~= 0 then
    registry, score = base .. K.finished, fmt_time(t)
  end
end
if registry then
  local added = redis.pcall('ZADD', registry, 'NX', score, jid)
  if type(added) == 'table' then
    return redis.error_reply(wrong_type(registry, 'zset') or added.err)
  end
  local gone = redis.pcall('ZREM', base .. K.started, jid)
  if type(gone) == 'table' then
    if added == 1 then redis.call('ZREM', registry, jid) end
    return redis.error_reply(gone.err)
  end
  if added == 0 then redis.call('ZADD', registry, score, jid) end  -- was there: its new score
else
  redis.call('ZREM', base .. K.started, jid)
end

if outcome == S.finished then
  if ukey and ukey ~= '' then
    local k = base .. K.unique .. ukey
    if redis.pcall('GET', k) == jid then
      if window > 0 then redis.call('EXPIRE', k, window) else redis.call('DEL', k) end
    end
  end
  if group and group ~= '' then release_group(base, jid) end
  if #dependents > 0 or notify then
    notify_dependents(base, jid, S.finished)
  end
  if keep == 0 then
    redis.call('DEL', jkey)
  else
    -- the token is blanked in the same HSET (readers: Job.token None; every fence also
    -- wants status 'started'); the error fields of an earlier attempt, or given here,
    -- go only when there are some (the HMGET read them): the record reads as before
    redis.call('HSET', jkey, F.ended_at, fmt_time(t), F.status, S.finished, F.token, '',
      unpack(ARGV, fa))
    if rec[11] or rec[12] or rec[13] or rec[14] or rec[15] or gives_error_fields() then
      redis.call('HDEL', jkey, unpack(ERROR_FIELDS))
    end
    if not registry then redis.call('ZADD', base .. K.finished, fmt_time(t), jid) end
    if keep > 0 then redis.call('EXPIRE', jkey, keep) end
  end
elseif outcome == 'retry' then
  -- keeps its group (if any), so the group's order holds across retries
  redis.call('HSET', jkey, F.ended_at, fmt_time(t), F.status, S.scheduled,
    F.scheduled_for, fmt_time(t + delay), F.token, '', unpack(ARGV, fa))
  if not registry then redis.call('ZADD', base .. K.scheduled, fmt_time(t + delay), jid) end
  redis.call('PUBLISH', base .. K.wake, jid)   -- idle workers learn when the retry is due
else
  if #ARGV >= fa then redis.call('HSET', jkey, unpack(ARGV, fa)) end
  to_failed(base, jid, t, failed_ttl, stopped and S.stopped or nil)   -- publishes done:<id>
end
-- Job.wait: published only when a waiter marked the record (`waited`, waiting.lua) after
-- it subscribed; a waiter that marks it after this step reads the outcome instead
if outcome ~= S.failed and rec[9] then redis.call('PUBLISH', base .. K.done .. jid, outcome) end
-- a queue with a concurrency cap: this end frees a place, and a worker that found the
-- cap full (claim.py: never quiet, but waiting for its poll) learns it, as from an
-- enqueue (_lib.lua, wake_if_first)
if redis.call('EXISTS', base .. K.max_active) == 1 and
    redis.call('ZCARD', base .. K.pending) > 0 then
  redis.call('PUBLISH', base .. K.wake, jid)
end
local lost = event and KEYS[2] and job_event(base, jid, KEYS[2], event.maxlen, t, event.ev,
  event.copy)
if lost then return {'ok', outcome, fmt_time(t), lost} end
-- the server time of the outcome: the worker counts it in that minute's outcome counts
-- (the dashboard's chart), written with its heartbeat by minutes.lua
return {'ok', outcome, fmt_time(t)}
