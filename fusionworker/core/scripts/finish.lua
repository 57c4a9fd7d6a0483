-- finish: record an attempt's outcome, fenced by its token (invariant 7): a late
-- outcome of an attempt the reaper already took back is refused ('stale').
-- KEYS[1] base
-- ARGV: job_id, token, outcome (finished|retry|failed), result_ttl, failed_ttl,
--       retry_delay, dedup_window, field, value, ...
-- Returns {'ok', outcome} | {'stale'}
local base = KEYS[1]
local jid, token, outcome = ARGV[1], ARGV[2], ARGV[3]
local result_ttl, failed_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local delay, window = tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
local jkey = base .. 'job:' .. jid
if hget(jkey, 'token') ~= token or hget(jkey, 'status') ~= 'started' then return {'stale'} end
local bad = check_types(base, jkey)
if bad then return redis.error_reply(bad) end
local t = now()
redis.call('ZREM', base .. 'started', jid)
if #ARGV > 7 then redis.call('HSET', jkey, unpack(ARGV, 8)) end
redis.call('HSET', jkey, 'ended_at', fmt_time(t))

if outcome == 'finished' then
  redis.call('HDEL', jkey, 'token', 'error_type', 'error_message', 'traceback', 'failure_reason')
  redis.call('HSET', jkey, 'status', 'finished')
  local ukey = hget(jkey, 'unique_key')
  if ukey and ukey ~= '' then
    local k = base .. 'unique:' .. ukey
    if redis.call('GET', k) == jid then
      if window > 0 then redis.call('EXPIRE', k, window) else redis.call('DEL', k) end
    end
  end
  release_group(base, jid)
  notify_dependents(base, jid, 'finished')
  if result_ttl == 0 then
    redis.call('DEL', jkey)
  else
    redis.call('ZADD', base .. 'finished', fmt_time(t), jid)
    if result_ttl > 0 then
      redis.call('EXPIRE', jkey, result_ttl)
      prune(base .. 'finished', t - result_ttl)
    end
  end
elseif outcome == 'retry' then
  -- keeps its group (if any), so the group's order holds across retries
  redis.call('HDEL', jkey, 'token')
  redis.call('HSET', jkey, 'status', 'scheduled', 'scheduled_for', fmt_time(t + delay))
  redis.call('ZADD', base .. 'scheduled', fmt_time(t + delay), jid)
else
  to_failed(base, jid, t, failed_ttl)   -- publishes done:<id>
end
if outcome ~= 'failed' then redis.call('PUBLISH', base .. 'done:' .. jid, outcome) end
-- outcomes per minute (web dashboard chart): fw:{q}:minute:<epoch minute>, kept ~2 h
local mkey = base .. 'minute:' .. fmt_int(math.floor(t / 60))
redis.call('HINCRBY', mkey, outcome, 1)
redis.call('EXPIRE', mkey, 7200)
return {'ok', outcome}
