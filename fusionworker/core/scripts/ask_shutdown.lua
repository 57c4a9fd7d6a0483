-- ask_shutdown: a stop asked of one worker from elsewhere (admin.request_shutdown;
-- docs/design.md, "Stopping one worker from elsewhere").
-- KEYS[1] the worker's heartbeat hash ; ARGV[1] its field (admin.SHUTDOWN_FIELD) ;
-- ARGV[2] 'warm' | 'cold'
-- Written only into a live worker's hash (it has the worker's TTL): never a hash of
-- its own. Returns 1, or 0 when no live worker has that hash (nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
