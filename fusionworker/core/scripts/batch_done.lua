-- batch_done: "job JID of batch BID ended with OUTCOME", on the BATCH's queue
-- (fusionworker/core/batch.py); and batch_seal's check. Idempotent: a job counts once
-- (SADD), and the callbacks are enqueued once (HSETNX fired) when the batch is
-- sealed and every job has ended.
-- KEYS[1] base of the batch's queue
-- ARGV: batch_id, job ref ("queue:id") or '' (seal check only), outcome, total or ''
-- Returns {'fired', n_callbacks} | {'counted'} | {'already'} | {'missing'}
local base = KEYS[1]
local bid, ref, outcome, total = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local bkey = base .. K.batch .. bid
local ekey = base .. K.batch_ended .. bid .. K.batch_ended_tail   -- refs of its ended jobs
if redis.call('EXISTS', bkey) == 0 then return {'missing'} end
local reply = 'counted'
if total ~= '' then redis.call('HSET', bkey, B.total, total, B.sealed, '1') end
if ref ~= '' then
  if redis.call('SADD', ekey, ref) == 0 then
    reply = 'already'
  elseif outcome ~= S.finished then
    redis.call('HINCRBY', bkey, B.failed, 1)
  end
end
if hget(bkey, B.sealed) ~= '1' then return {reply} end
if redis.call('SCARD', ekey) < tonumber(hget(bkey, B.total) or '0') then
  return {reply}
end
if redis.call('HSETNX', bkey, B.fired, '1') == 0 then return {reply} end
local t = now()
redis.call('HSET', bkey, B.ended_at, fmt_time(t))
redis.call('ZREM', base .. K.batches, bid)
local failed = tonumber(hget(bkey, B.failed) or '0') > 0
local callbacks = cjson.decode(hget(bkey, B.callbacks) or '{}')
local n = 0
for _, kind in ipairs({B.on_complete, B.on_success, B.on_failure}) do
  local cb = callbacks[kind]
  if cb and (kind == B.on_complete or (kind == B.on_success) == not failed) then
    local jid = cb[1]
    if not hget(base .. K.job .. jid, F.status) then
      new_job(base, jid, 0, t, cb[2], 1)
      make_ready(base, jid)
      n = n + 1
    end
  end
end
return {'fired', n}
