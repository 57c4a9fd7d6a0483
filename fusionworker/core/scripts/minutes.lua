-- minutes: add a worker's outcome counts to the per-minute hashes of one queue (the
-- dashboard's chart, `info`): the worker counts each outcome finish.lua recorded, in
-- the server minute finish.lua answered, and sends the counts with its heartbeat and at
-- stop (fusionworker/runtime/minutes.py), instead of one HINCRBY per finish.
-- KEYS[1] base
-- ARGV: result_ttl (the worker's setting), then minute, outcome, count, ...
-- Returns how many (minute, outcome, count) triples were taken, from the first: written,
-- or skipped on a key of another type (a counter, not a record: pcall, as finish.lua
-- did). A refusal of another kind (OOM, at the HINCRBY, the only write that can be
-- refused for it) stops there: the worker gives the triples from there back.
-- The call that makes a field (the first count of an outcome in a minute) sets the
-- key's TTL (~2 h); the one that makes a minute's `finished` field also prunes
-- `finished` of entries older than result_ttl, in the same step as before (once per
-- minute): the records expire on their own (finish.lua's EXPIRE), their ids leave the
-- registry within about a minute plus one heartbeat interval. A `finished` of another
-- type is not pruned (pcall).
local base = KEYS[1]
local result_ttl = tonumber(ARGV[1]) or 0
local taken = 0
for i = 2, #ARGV - 2, 3 do
  local mkey = base .. K.minute .. ARGV[i]
  local outcome, n = ARGV[i + 1], tonumber(ARGV[i + 2])
  local got = redis.pcall('HINCRBY', mkey, outcome, n)
  if type(got) == 'table' and not string.find(got.err or '', '^WRONGTYPE') then
    return taken
  end
  taken = taken + 1
  if got == n then   -- the field is new
    redis.call('EXPIRE', mkey, 7200)
    if outcome == S.finished and result_ttl > 0 then
      redis.pcall('ZREMRANGEBYSCORE', base .. K.finished, '-inf',
        '(' .. fmt_time(now() - result_ttl))
    end
  end
end
return taken
