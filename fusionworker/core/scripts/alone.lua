-- alone: the attempt of a suspect of a worker death (worker_deaths > 0) runs alone in
-- its worker (runtime/solo.py): its record names that attempt before its horse starts,
-- so that the reaper, finding that worker dead, fails it as the culprit (requeue.lua
-- 'reap') and charges no other job. Fenced by the attempt's token (invariant 7).
-- KEYS[1] base
-- ARGV: job_id, token
-- Returns 1 (written) | 0 (the attempt no longer owns the job: it must not run)
local base = KEYS[1]
local jkey = base .. K.job .. ARGV[1]
if hget(jkey, F.token) ~= ARGV[2] or hget(jkey, F.status) ~= S.started then return 0 end
redis.call('HSET', jkey, F.alone, ARGV[2])
return 1
