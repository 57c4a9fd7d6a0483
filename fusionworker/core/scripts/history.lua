-- history: events of jobs, each into its job's own history (the dashboard's job page, the
-- API's job events, `events --job`), in the pipeline that delivers them; on a single
-- Redis it XADDs each event to the stream here too, so the history holds its stream id.
-- One call takes a run of events (the sink's chunk: one command, not one per event); on a
-- Cluster, one event (its job's keys share a slot, the stream is on another).
-- KEYS: per event i its job's history (LIST, fw:{q}:job_events:<id>) as KEYS[2i-1] and
--       its job's record as KEYS[2i]; then, optional (not on a Cluster), the stream
-- ARGV: cap (events kept, the newest), ttl of a new history, ttl once the record is gone,
--       the stream's approximate MAXLEN; then per event: 'copy' or 'keep', the number
--       of its field/value pairs, the pairs
-- Returns the events' stream ids, in order ('' each without the stream).
-- TTL: history_push (_lib.lua): a new history gets ARGV[2] (a job that lives longer loses
-- its first events); an event that ends (or revives) the job ('copy': completed, failed,
-- canceled...) gives it the record's TTL, which the script that ended the job set before
-- the event was emitted: none while the record has none, ARGV[3] seconds when it is gone.
local cap, ttl, gone = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local events = 0
local at = 5
while at <= #ARGV do
  events = events + 1
  at = at + 2 + 2 * tonumber(ARGV[at + 1])
end
local stream = KEYS[2 * events + 1]
local ids = {}
at = 5
for e = 1, events do
  local first, last = at + 2, at + 1 + 2 * tonumber(ARGV[at + 1])
  local id = ''
  if stream then
    id = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, first, last))
  end
  local doc = {}
  for i = first, last, 2 do doc[ARGV[i]] = ARGV[i + 1] end
  history_push(KEYS[2 * e - 1], KEYS[2 * e], cjson.encode({id, doc}), ARGV[at] == 'copy',
    cap, ttl, gone)
  ids[e] = id
  at = last + 1
end
return ids
