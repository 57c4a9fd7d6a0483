-- touch_many: one heartbeat renews the lease of every job a worker runs in this
-- queue (a worker with --concurrency N runs up to N at once).
-- KEYS[1] base ; ARGV: lease_seconds, job_id, token, job_id, token, ...
-- Returns a list with, per job: 1, or 0 when that attempt no longer owns its job
-- (reaped, canceled): the parent then kills that horse; 2 when it owns it and its stop
-- was asked (stop.lua): the parent kills it as stopped. Scripts.touch sends it for one job.
local base = KEYS[1]
local until_ = lease_end(now(), tonumber(ARGV[1]))
local out = {}
for i = 2, #ARGV - 1, 2 do
  local jid, token = ARGV[i], ARGV[i + 1]
  local jkey = base .. K.job .. jid
  local rec = hmget(jkey, F.stop_requested, F.token, F.status)   -- one read (nil: not a hash)
  if not rec or rec[2] ~= token or rec[3] ~= S.started then
    out[#out + 1] = 0
  else
    redis.call('ZADD', base .. K.started, 'XX', until_, jid)
    out[#out + 1] = rec[1] and 2 or 1
  end
end
return out
