-- waiting: Job.wait's read of a job once it is subscribed to fw:{q}:done:<id>. Marks the
-- record `waited` (unless the job ended already) so that finish.lua publishes the
-- outcome of its next attempt there, then reads the record, in one step: an outcome
-- recorded before this step is in what it reads, one recorded after it sees the mark
-- and publishes to the subscription (docs/design.md, "Waiting for a job").
-- KEYS[1] base
-- ARGV: job_id
-- Returns {marked, {hash...}}: marked is 1 when the record carries the mark (or the job
-- ended: nothing more will be published for it), 0 when Redis refused the write (out
-- of memory, a read-only replica): the waiter then reads again on a timer instead of
-- waiting for a message. {0, {}} for a missing record; an error for a key of another
-- type (nothing written).
local jkey = KEYS[1] .. K.job .. ARGV[1]
local ty = key_type(jkey)
if ty == 'none' then return {0, {}} end
if ty ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. jkey .. ' holds a ' .. ty .. ', not a hash')
end
local marked = 1
local st = hget(jkey, F.status)
if st ~= S.finished and st ~= S.failed and st ~= S.canceled then
  local ok = redis.pcall('HSET', jkey, F.waited, '1')
  if type(ok) == 'table' and ok.err then marked = 0 end
end
return {marked, redis.call('HGETALL', jkey)}
