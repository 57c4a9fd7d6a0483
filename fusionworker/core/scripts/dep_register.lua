-- dep_register: step 1 of an enqueue with depends_on (workflows.py), on the
-- DEPENDENCY's queue: record that a job waits on it, unless it already ended.
-- KEYS[1] base of the dependency's queue
-- ARGV: dependency job_id, dependent ref ("queue:job_id")
-- Returns {'registered', status} | {status} for an ended one (finished|failed|canceled)
--         | {'missing'}
local base = KEYS[1]
local jkey = base .. K.job .. ARGV[1]
local st = hget(jkey, F.status)
if not st then return {'missing'} end
if st == S.finished or st == S.failed or st == S.canceled then return {st} end
redis.call('SADD', base .. K.dependents .. ARGV[1], ARGV[2])
redis.call('HSET', jkey, F.has_dependents, '1')
return {'registered', st}
