-- claim: the atomic take (invariant 1). Promotes due scheduled jobs, honours
-- pause and the concurrency cap, pops the best pending job and records it as
-- started with a lease deadline and a fresh attempt token, in one round trip.
-- There is no moment when a claimed job is in no structure.
-- KEYS[1] base
-- ARGV: worker_name, token, lease_seconds, failed_ttl[, count]
-- Returns {'job', now, {hash...}, job_id} | {'empty', next_scheduled_score} | {'paused'} |
--         {'capped'} | {'missing', job_id} | {'limited', next_allowed_time}
-- With count (a worker with free slots, --concurrency): up to count jobs, each
-- taken exactly as a single claim would (priority/FIFO order, the cap and the
-- rate limit checked before each one); their tokens are token .. ':' .. i
-- (i = 1, 2, ...). Returns {'job', now, {{hash...}, job_id} | missing_id, ...}
-- when it took at least one, else the single claim's answers (a queue entry
-- without a record is dead-lettered and named by its id in place of a pair).
local base = KEYS[1]
local t = now()
local bad = check_types(base)
if bad then return redis.error_reply(bad) end
local count = tonumber(ARGV[5] or '')
promote_due(base, t, math.max(100, count or 1))
if redis.call('EXISTS', base .. 'paused') == 1 then return {'paused'} end
local cap = redis.call('GET', base .. 'max_active')
if cap then cap = tonumber(cap) end

local function take(token)
  if cap and redis.call('ZCARD', base .. 'started') >= cap then return {'capped'} end
  local ids = redis.call('ZREVRANGE', base .. 'pending', 0, 0)
  if #ids == 0 then
    local nxt = redis.call('ZRANGE', base .. 'scheduled', 0, 0, 'WITHSCORES')
    return {'empty', nxt[2] or ''}
  end
  -- rate limit (sliding-window log, docs/design.md): at most `limit` starts in any
  -- `window` seconds, by this server's clock; refused -> {'limited', when the oldest
  -- start leaves the window}. Only a queue with pending jobs is held.
  local rate = redis.call('HMGET', base .. 'rate', 'limit', 'window')
  if rate[1] then
    local rlog, window = base .. 'rate:log', tonumber(rate[2])
    redis.call('ZREMRANGEBYSCORE', rlog, '-inf', fmt_time(t - window))
    if redis.call('ZCARD', rlog) >= tonumber(rate[1]) then
      redis.call('HSETNX', base .. 'rate', 'held_since', fmt_time(t))
      local oldest = redis.call('ZRANGE', rlog, 0, 0, 'WITHSCORES')
      return {'limited', fmt_time(tonumber(oldest[2]) + window)}
    end
  end

  local jid = ids[1]
  local jkey = base .. 'job:' .. jid
  local jtype = key_type(jkey)
  redis.call('ZREM', base .. 'pending', jid)
  if jtype ~= 'hash' and jtype ~= 'none' then
    -- a key of the wrong type where the record should be: dead-letter the id, leave the key
    redis.call('ZADD', base .. 'failed', fmt_time(t), jid)
    return {'missing', jid}
  end
  if jtype == 'none' then
    -- garbage in the queue: an id without a record. Dead-letter it, say why.
    redis.call('HSET', jkey, 'id', jid, 'error_type', 'MalformedJob',
      'error_message', 'queue entry has no job record', 'failure_reason', 'malformed')
    to_failed(base, jid, t, tonumber(ARGV[4]))
    return {'missing', jid}
  end
  if rate[1] then  -- this start takes a place in the rate window
    local window = tonumber(rate[2])
    redis.call('ZADD', base .. 'rate:log', fmt_time(t), token)
    redis.call('PEXPIRE', base .. 'rate:log', math.ceil(window * 1000) + 1000)
    local held = hget(base .. 'rate', 'held_since')
    if held then
      redis.call('HINCRBYFLOAT', base .. 'rate', 'held_seconds', fmt_time(t - tonumber(held)))
      redis.call('HDEL', base .. 'rate', 'held_since')
    end
  end
  redis.call('ZADD', base .. 'started', fmt_time(t + tonumber(ARGV[3])), jid)
  redis.call('HINCRBY', jkey, 'attempts', 1)
  redis.call('HSET', jkey, 'status', 'started', 'started_at', fmt_time(t), 'worker', ARGV[1],
    'token', token)
  return {'job', fmt_time(t), redis.call('HGETALL', jkey), jid}
end

if not count then return take(ARGV[2]) end
local out = {'job', fmt_time(t)}
local last
for i = 1, count do
  last = take(ARGV[2] .. ':' .. i)
  if last[1] == 'job' then
    out[#out + 1] = {last[3], last[4]}
  elseif last[1] == 'missing' then
    out[#out + 1] = last[2]
  else
    break
  end
end
if #out > 2 then return out end
return last
