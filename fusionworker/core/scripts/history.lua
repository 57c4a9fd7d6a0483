-- history: one event of a job into the job's own history (the dashboard's job page, the
-- API's job events, `events --job`), in the pipeline that delivers it; on a single Redis
-- it XADDs the event to the stream here too, so the history holds its stream id.
-- KEYS[1] the job's history (LIST, fw:{q}:job_events:<id>), KEYS[2] the job record,
-- KEYS[3] (optional: not on a Cluster, where the stream is on another slot) the stream
-- ARGV: cap (events kept, the newest), 'copy' or 'keep', ttl of a new history, ttl once
--       the record is gone, the stream's approximate MAXLEN, then the event's
--       field/value pairs
-- Returns the stream id ('' without KEYS[3]).
-- TTL: a new history gets ARGV[3] (a job that lives longer loses its first events); an
-- event that ends (or revives) the job ('copy': completed, failed, canceled...) gives it
-- the record's TTL, which the script that ended the job set before the event was
-- emitted: none while the record has none, ARGV[4] seconds when it is gone.
local hist, jkey, stream = KEYS[1], KEYS[2], KEYS[3]
local cap = tonumber(ARGV[1])
local id = ''
if stream then
  id = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[5], '*', unpack(ARGV, 6))
end
local doc = {}
for i = 6, #ARGV, 2 do doc[ARGV[i]] = ARGV[i + 1] end
local n = redis.call('RPUSH', hist, cjson.encode({id, doc}))
if n > cap then redis.call('LTRIM', hist, -cap, -1) end
if ARGV[2] == 'copy' then
  local ttl = redis.call('TTL', jkey)
  if ttl == -2 then
    redis.call('EXPIRE', hist, ARGV[4])
  elseif ttl == -1 then
    redis.call('PERSIST', hist)
  else
    redis.call('EXPIRE', hist, ttl)
  end
elseif n == 1 then
  redis.call('EXPIRE', hist, ARGV[3])
end
return id
