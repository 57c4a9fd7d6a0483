-- history: events of jobs, each into its job's own history (the dashboard's job page, the
-- API's job events, `events --job`), in the pipeline that delivers them; on a single
-- Redis it XADDs each event to the stream here too, so the history holds its stream id.
-- One call takes a run of events (the sink's chunk: one command, not one per event); on a
-- Cluster, one event (its job's keys share a slot, the stream is on another).
-- KEYS: per event i its job's history (LIST, fw:{q}:job_events:<id>) as KEYS[2i-1] and
--       its job's record as KEYS[2i]; then, optional (not on a Cluster), the stream
-- ARGV: the stream's approximate MAXLEN; then per event: 'copy' or 'keep', the number
--       of its field/value pairs, the pairs
-- Returns the events' stream ids, in order ('' each without the stream).
-- Each event is put_event's (_lib.lua): the history's cap and TTLs are there (a job that
-- lives longer than a new history's TTL loses its first events; 'copy', an event that
-- ends or revives the job, gives the history the record's TTL).
local events = 0
local at = 2
while at <= #ARGV do
  events = events + 1
  at = at + 2 + 2 * tonumber(ARGV[at + 1])
end
local stream = KEYS[2 * events + 1]
local ids = {}
at = 2
for e = 1, events do
  local last = at + 1 + 2 * tonumber(ARGV[at + 1])
  ids[e] = put_event(stream, ARGV[1], KEYS[2 * e - 1], KEYS[2 * e], {unpack(ARGV, at + 2, last)},
    ARGV[at] == 'copy')
  at = last + 1
end
return ids
