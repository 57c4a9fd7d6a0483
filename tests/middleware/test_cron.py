"""Cron entries: schedule arithmetic (croniter, time zones, DST), the exactly-once
compare-and-set of cron_tick.lua, catch-up after downtime, overlap, pause/remove,
the CLI, and real worker processes ticking a 1-second schedule."""

from __future__ import annotations

import collections
import json
import logging
import signal
import threading
import types
import uuid
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from fusionworker.cli import main
from fusionworker.core import record
from fusionworker.core.keys import Keys
from fusionworker.core.scripts.replies import CronTick
from fusionworker.exceptions import InvalidFunction
from fusionworker.middleware import cron
from tests.waiting import wait_for

BERLIN = ZoneInfo("Europe/Berlin")
EVERY_SECOND = "* * * * * *"


def berlin(*args: int, fold: int = 0) -> float:
    return datetime(*args, tzinfo=BERLIN, fold=fold).timestamp()


def local(ts: float) -> str:
    return datetime.fromtimestamp(ts, BERLIN).isoformat()


def server_now(r) -> float:
    s, us = r.time()
    return s + us / 1e6


def entry_key(settings, name: str, queue: str = "default") -> str:
    return Keys(settings.prefix).queue(queue).cron_entry(name)


def cron_jobs(r, settings, queue: str = "default") -> list[dict[str, str]]:
    """Every job record a cron entry enqueued on ``queue``."""
    pattern = Keys(settings.prefix).queue(queue).job("*")
    jobs = [r.hgetall(k) for k in r.scan_iter(match=pattern, count=1000)]
    return [j for j in jobs if j.get("cron")]


def set_due(r, settings, name: str, due: float, queue: str = "default") -> None:
    """Pretend the entry's next run is ``due`` (e.g. long past: workers were down)."""
    r.zadd(Keys(settings.prefix).queue(queue).cron, {name: float(int(due))})


# -- schedule arithmetic ---------------------------------------------------------------


def test_seconds_field_and_plain_minutes():
    t = 1_700_000_000.0
    assert cron.next_after(EVERY_SECOND, "UTC", t) == t + 1
    assert cron.next_after(EVERY_SECOND, "UTC", t + 0.4) == t + 1
    assert cron.next_after("* * * * * */5", "UTC", t + 1) == t + 5
    assert cron.next_after("*/5 * * * *", "UTC", t) == 1_700_000_100.0  # 22:15 UTC


def test_dst_spring_forward_berlin():
    # 2024-03-31: clocks jump 02:00 CET -> 03:00 CEST
    before = berlin(2024, 3, 30, 12)
    daily = cron.next_after("0 9 * * *", "Europe/Berlin", before)
    assert local(daily) == "2024-03-31T09:00:00+02:00"   # 07:00 UTC, not 08:00
    assert local(cron.next_after("0 9 * * *", "Europe/Berlin", daily)) == \
        "2024-04-01T09:00:00+02:00"
    assert daily - berlin(2024, 3, 30, 9) == 23 * 3600     # the short day
    # 02:30 does not exist that day: it runs at the first valid time after the gap
    assert local(cron.next_after("30 2 * * *", "Europe/Berlin", before)) == \
        "2024-03-31T03:00:00+02:00"
    hourly, t = [], berlin(2024, 3, 31, 0, 30)
    for _ in range(3):
        t = cron.next_after("0 * * * *", "Europe/Berlin", t)
        hourly.append(local(t))
    assert hourly == ["2024-03-31T01:00:00+01:00", "2024-03-31T03:00:00+02:00",
                      "2024-03-31T04:00:00+02:00"]   # one real hour apart each


def test_dst_fall_back_berlin():
    # 2024-10-27: clocks go back 03:00 CEST -> 02:00 CET; 02:00-03:00 happens twice
    before = berlin(2024, 10, 26, 12)
    first = cron.next_after("30 2 * * *", "Europe/Berlin", before)
    assert local(first) == "2024-10-27T02:30:00+02:00"
    # a fixed-hour schedule runs once: the repeated 02:30 (CET) is skipped
    assert local(cron.next_after("30 2 * * *", "Europe/Berlin", first)) == \
        "2024-10-28T02:30:00+01:00"
    assert local(cron.next_after("0 9 * * *", "Europe/Berlin", before)) == \
        "2024-10-27T09:00:00+01:00"                     # 08:00 UTC now
    # wildcard hours follow real time: every 30 minutes, through both passes
    seen, t = [], berlin(2024, 10, 27, 1, 45)
    for _ in range(5):
        t = cron.next_after("*/30 * * * *", "Europe/Berlin", t)
        seen.append(t)
    assert [b - a for a, b in zip(seen, seen[1:])] == [1800.0] * 4
    assert [local(x)[11:] for x in seen] == ["02:00:00+02:00", "02:30:00+02:00",
                                             "02:00:00+01:00", "02:30:00+01:00",
                                             "03:00:00+01:00"]


def test_plan_on_time_late_and_missed():
    entry = cron.CronEntry(name="e", queue="q", schedule=EVERY_SECOND, func="tests.jobs:noop",
                           args=[], kwargs={})
    due = 1_700_000_000.0
    assert cron.plan(entry, due, due + 0.3) == ("run", due + 1, "due")
    assert cron.plan(entry, due, due + 1.5) == ("run", due + 1, "due")  # late, within grace
    assert cron.plan(entry, due, due + 30.2) == ("skip", due + 31, "missed")
    entry.catch_up = "once"
    assert cron.plan(entry, due, due + 30.2) == ("run", due + 31, "catch_up")
    hourly = cron.CronEntry(name="h", queue="q", schedule="0 * * * *", func="tests.jobs:noop",
                            args=[], kwargs={})
    top = 1_699_999_200.0  # 22:00 UTC
    # an hourly run 20 minutes late is the current run, not a missed one
    assert cron.plan(hourly, top, top + 1200) == ("run", top + 3600, "due")


def test_register_validates(r, settings):
    with pytest.raises(cron.InvalidSchedule):
        cron.register(r, settings, "bad", "61 * * * *", "tests.jobs:noop")
    with pytest.raises(cron.InvalidSchedule):
        cron.register(r, settings, "bad", "* * * * *", "tests.jobs:noop", timezone="Mars/Base")
    with pytest.raises(cron.InvalidSchedule):
        cron.register(r, settings, "bad", "* * * * *", "tests.jobs:noop", catch_up="all")
    with pytest.raises(cron.InvalidSchedule):
        cron.register(r, settings, "has space", "* * * * *", "tests.jobs:noop")
    with pytest.raises(InvalidFunction):
        cron.register(r, settings, "bad", "* * * * *", "not a ref")
    assert cron.list_entries(r, settings.prefix) == []


# -- the script: exactly once, overlap, pause, remove, catch-up -----------------------------


def test_one_due_time_is_enqueued_once_by_racing_callers(r, settings):
    # a daily schedule: the next due time is far away, so each caller meets the same one
    cron.register(r, settings, "race", "0 3 * * *", "tests.jobs:noop", allow_overlap=True)
    set_due(r, settings, "race", server_now(r) - 1)
    replies: list = []
    barrier = threading.Barrier(8)

    def tick() -> None:
        import redis as redis_mod
        client = redis_mod.Redis.from_url(settings.redis_url, decode_responses=True)
        barrier.wait()
        replies.extend(reply for _, _, reply in cron.run_due(client, settings.prefix,
                                                             ["default"]))

    threads = [threading.Thread(target=tick) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = sorted(reply.outcome for reply in replies)
    assert kinds.count("queued") == 1, kinds
    assert set(kinds) <= {"queued", "moved"}
    assert len(cron_jobs(r, settings)) == 1
    entry = cron.get_entry(r, settings, "race")
    assert entry.runs == 1 and entry.next_run > entry.last_run


def test_a_broken_entry_of_any_kind_is_said_once_and_the_others_run(r, settings, caplog):
    """An entry Redis holds that cannot be used (its hash of another type, a due time that
    is no time, a priority or a zone no entry can have) is skipped and said once, in one
    line; the other entries, of its queue and of others, run on every tick."""
    tag = uuid.uuid4().hex[:6]
    bad = {kind: f"{kind}-{tag}" for kind in ("string", "neginf", "priority", "zone")}
    other = Keys(settings.prefix).queue("other")
    cron.register(r, settings, "good", EVERY_SECOND, "tests.jobs:noop", allow_overlap=True)
    cron.register(r, settings, "good", EVERY_SECOND, "tests.jobs:noop", queue="other",
                  allow_overlap=True)
    for name in bad.values():
        cron.register(r, settings, name, EVERY_SECOND, "tests.jobs:noop", queue="other")
    r.delete(other.cron_entry(bad["string"]))
    r.set(other.cron_entry(bad["string"]), "x")
    r.hset(other.cron_entry(bad["priority"]), "priority", "99999999999999999999")
    r.hset(other.cron_entry(bad["zone"]), "timezone", "../../etc/passwd")
    caplog.set_level(logging.ERROR, logger="fusionworker.cron")
    for tick in (1, 2):
        now = server_now(r)
        for queue, name in [("default", "good"), ("other", "good"),
                            *(("other", n) for n in bad.values())]:
            set_due(r, settings, name, now, queue=queue)
        r.zadd(other.cron, {bad["neginf"]: float("-inf")})
        ran = cron.run_due(r, settings.prefix, ["default", "other"])
        assert sorted((q, n, t.outcome) for q, n, t in ran) == [
            ("default", "good", "queued"), ("other", "good", "queued")], ran
        said = [rec.getMessage() for rec in caplog.records if rec.name == "fusionworker.cron"]
        if tick == 1:     # one line each, naming the entry and its queue
            for name in bad.values():
                assert sum(f"{name} on other" in line for line in said) == 1, (name, said)
            caplog.clear()
        else:             # said once: not again at the next tick
            assert not any(tag in line for line in said), said
    assert len(cron_jobs(r, settings)) == 2 and len(cron_jobs(r, settings, "other")) == 2


def test_an_index_of_another_type_leaves_cron_running_and_is_said_once(r, settings, caplog):
    """``<prefix>:cron_queues`` of another type: every served queue is looked at instead."""
    cron.register(r, settings, "good", EVERY_SECOND, "tests.jobs:noop", allow_overlap=True)
    index = Keys(settings.prefix).cron_queues
    r.delete(index)
    r.set(index, "x")
    scheduler = cron.CronScheduler()
    worker = types.SimpleNamespace(queue_names=["default"], settings=settings, connection=r,
                                   name="w", middleware=[])
    caplog.set_level(logging.ERROR, logger="fusionworker.cron")
    first = server_now(r) - 1
    for i in range(2):      # two due times apart: two runs, whichever second each tick is in
        set_due(r, settings, "good", first + i)
        scheduler.on_tick(worker)
    assert len(cron_jobs(r, settings)) == 2
    said = [rec.getMessage() for rec in caplog.records if "index" in rec.getMessage()]
    assert len(said) == 1 and "every served queue" in said[0], said


def test_job_record_carries_the_definition(r, settings, queue):
    cron.register(r, settings, "report", "0 3 * * *", "tests.jobs:echo", args=[1, "a"],
                  kwargs={"k": True}, queue="reports", priority=7, timeout=12.5, max_retries=2)
    set_due(r, settings, "report", server_now(r) - 1, queue="reports")
    [(_, _, reply)] = cron.run_due(r, settings.prefix, ["reports"])
    assert reply.outcome == "queued"
    job = queue("reports").fetch_job(reply.job_id)
    assert (job.func, job.args, job.kwargs) == ("tests.jobs:echo", [1, "a"], {"k": True})
    assert (job.priority, job.timeout, job.max_retries, job.status) == (7, 12.5, 2, "queued")
    assert queue("reports").job_ids() == [job.id]
    entry = cron.get_entry(r, settings, "report")
    assert entry.last_job == job.id and entry.last_status == "queued"
    # the entry's hash holds fields of its schema (the scripts' C.<name>): all but the ones
    # written once the entry is paused, or a run skipped or missed
    held = set(r.hgetall(entry_key(settings, "report", "reports")))
    assert set(record.CRON_FIELDS) - held == {"paused", "skips", "misses"}
    assert held <= set(record.CRON_FIELDS)
    assert datetime.fromtimestamp(entry.next_run, UTC).strftime("%H:%M") == "03:00"


def test_no_overlap_skips_while_the_last_run_is_live(r, settings, burst):
    cron.register(r, settings, "solo", EVERY_SECOND, "tests.jobs:noop")
    set_due(r, settings, "solo", server_now(r) - 0.1)
    [(_, _, first)] = cron.run_due(r, settings.prefix, ["default"])
    assert first.outcome == "queued"
    set_due(r, settings, "solo", server_now(r) - 0.1)
    [(_, _, second)] = cron.run_due(r, settings.prefix, ["default"])
    assert second == CronTick("skipped", first.job_id)
    entry = cron.get_entry(r, settings, "solo")
    assert (entry.last_status, entry.skips, entry.last_job_status) == ("skipped", 1, "queued")
    assert cron.list_entries(r, settings.prefix)[0].last_job_status == "queued"
    burst()  # the run finishes: the next due time runs again
    set_due(r, settings, "solo", server_now(r) - 0.1)
    [(_, _, third)] = cron.run_due(r, settings.prefix, ["default"])
    assert third.outcome == "queued" and third.job_id != first.job_id


def test_allow_overlap_enqueues_anyway(r, settings):
    cron.register(r, settings, "many", EVERY_SECOND, "tests.jobs:noop", allow_overlap=True)
    for _ in range(3):
        set_due(r, settings, "many", server_now(r) - 0.1)
        [(_, _, reply)] = cron.run_due(r, settings.prefix, ["default"])
        assert reply.outcome == "queued"
    assert len(cron_jobs(r, settings)) == 3


@pytest.mark.parametrize("mode", ["skip", "once"])
def test_downtime_gives_no_burst(r, settings, mode):
    cron.register(r, settings, "late", EVERY_SECOND, "tests.jobs:noop", catch_up=mode,
                  allow_overlap=True)
    now = server_now(r)
    set_due(r, settings, "late", now - 300)  # workers were down five minutes
    for _ in range(3):
        cron.run_due(r, settings.prefix, ["default"])
    # only the runs of the downtime count: on a loaded machine the three ticks can
    # span a second, and the run due after `now` is then rightly enqueued
    jobs = [job for job in cron_jobs(r, settings) if float(job["cron_due"]) <= now]
    entry = cron.get_entry(r, settings, "late")
    assert entry.next_run > now and entry.misses == (1 if mode == "skip" else 0)
    if mode == "skip":
        assert jobs == []
    else:
        assert len(jobs) == 1 and float(jobs[0]["cron_due"]) == int(now - 300)


def test_pause_resume_remove(r, settings):
    cron.register(r, settings, "p", EVERY_SECOND, "tests.jobs:noop", allow_overlap=True)
    cron.pause(r, settings, "p")
    set_due(r, settings, "p", server_now(r) - 10)  # a tick that read the entry before the pause
    assert [reply for _, _, reply in cron.run_due(r, settings.prefix, ["default"])] == \
        [CronTick("paused")]
    assert cron.run_due(r, settings.prefix, ["default"]) == []  # parked at +inf
    entry = cron.get_entry(r, settings, "p")
    assert entry.paused and entry.next_run is None and cron_jobs(r, settings) == []
    # re-registering (e.g. on deploy) keeps the pause
    cron.register(r, settings, "p", "* * * * * */2", "tests.jobs:noop")
    assert cron.get_entry(r, settings, "p").paused
    entry = cron.resume(r, settings, "p")
    assert not entry.paused and entry.next_run > server_now(r) - 0.01  # no make-up runs
    assert entry.schedule == "* * * * * */2"
    cron.remove(r, settings, "p")
    assert cron.list_entries(r, settings.prefix) == []
    assert not r.exists(entry_key(settings, "p"))
    with pytest.raises(cron.NoSuchCronEntry):
        cron.remove(r, settings, "p")
    # a score left behind without its definition (removal raced a tick) is dropped
    r.zadd(Keys(settings.prefix).queue("default").cron, {"p": 5.0})
    assert [reply for _, _, reply in cron.run_due(r, settings.prefix, ["default"])] == \
        [CronTick("moved")]
    assert r.zcard(Keys(settings.prefix).queue("default").cron) == 0
    assert cron_jobs(r, settings) == []


def test_same_name_in_two_queues_needs_queue(r, settings):
    cron.register(r, settings, "dup", "* * * * *", "tests.jobs:noop", queue="a")
    cron.register(r, settings, "dup", "* * * * *", "tests.jobs:noop", queue="b")
    with pytest.raises(cron.NoSuchCronEntry, match="--queue"):
        cron.pause(r, settings, "dup")
    cron.pause(r, settings, "dup", queue="b")
    assert [(e.queue, e.paused) for e in cron.list_entries(r, settings.prefix)] == \
        [("a", False), ("b", True)]


def test_cli(r, settings):
    runner = CliRunner()
    env = {"FUSIONWORKER_PREFIX": settings.prefix, "REDIS_URL": settings.redis_url,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    out = run("cron", "add", "nightly", "30 2 * * *", "tests.jobs:echo", "1", "x",
              "--queue", "reports", "--timezone", "Europe/Berlin", "--priority", "5",
              "--catch-up", "once")
    assert "nightly on reports" in out and "next run" in out
    run("cron", "add", "fast", "* * * * * */10", "tests.jobs:noop", "--allow-overlap")
    listing = json.loads(run("cron", "list", "--json"))
    by_name = {e["name"]: e for e in listing}
    assert by_name["nightly"]["args"] == [1, "x"]
    assert (by_name["nightly"]["timezone"], by_name["nightly"]["priority"],
            by_name["nightly"]["catch_up"]) == ("Europe/Berlin", 5, "once")
    assert by_name["fast"]["allow_overlap"] is True
    assert "2 cron entries" in run("cron", "list")
    assert "paused" in run("cron", "pause", "nightly")
    assert "paused" in run("cron", "list", "--queue", "reports")
    assert "resumed" in run("cron", "resume", "nightly")
    assert "removed" in run("cron", "remove", "fast")
    bad = runner.invoke(main, ["cron", "remove", "fast"], env=env)
    assert bad.exit_code != 0 and "no cron entry 'fast'" in bad.output
    bad = runner.invoke(main, ["cron", "add", "x", "not cron", "tests.jobs:noop"], env=env)
    assert bad.exit_code != 0 and "invalid cron schedule" in bad.output


@pytest.mark.parametrize(("schedule", "says"), [
    ("* * * * * * *", "expected 5 fields"),           # croniter's year field: not ours
    ("* * * *", "expected 5 fields"),
    ("1-0 * * * *", "the range 1-0 of the minute field runs backwards"),
    ("0 9 * * fri-mon", "the range fri-mon of the day-of-week field runs backwards"),
    ("0 0 1 dec-jan *", "the range dec-jan of the month field runs backwards"),
    ("61 * * * *", "the minute field '61' is not valid: it takes 0-59"),
    ("*/0 * * * *", "a step /N is at least 1"),
    ("0 0 * 13 *", "the month field '13' is not valid: it takes 1-12 or jan-dec"),
    ("* * 31 2 *", "never runs: no date matches"),
    ("0 0 30 2 *", "never runs: no date matches"),
])
def test_cron_add_refuses_what_it_cannot_honour_in_one_line_storing_nothing(
        r, settings, prefix, schedule, says):
    env = {"FUSIONWORKER_PREFIX": settings.prefix, "REDIS_URL": settings.redis_url,
           "FUSIONWORKER_ALLOWED_MODULES": "tests"}
    bad = CliRunner().invoke(main, ["cron", "add", "x", schedule, "tests.jobs:noop",
                                    "--queue", "crons"], env=env)
    assert bad.exit_code != 0, bad.output
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], bad.output
    assert "unexpected" not in bad.output and "Croniter" not in bad.output
    assert sorted(r.scan_iter(f"{prefix}:*")) == []          # nothing stored
    with pytest.raises(cron.InvalidSchedule, match=says.split(":")[0]):
        cron.register(r, settings, "x", schedule, "tests.jobs:noop", queue="crons")
    assert sorted(r.scan_iter(f"{prefix}:*")) == []


def test_a_tick_reads_only_indexed_queues_and_indexes_old_entries_at_start(r, settings):
    """An idle worker on many queues reads one SMEMBERS a tick, not every queue's cron
    ZSET; entries written without the index (an older version) are found by the look
    over every served queue at start (and every CRON_RESCAN seconds)."""
    from fusionworker.core.queue import Queue
    from fusionworker.runtime.worker import Worker

    cron.register(r, settings, "tick", "0 3 * * *", "tests.jobs:noop", queue="old")
    set_due(r, settings, "tick", server_now(r) - 1, queue="old")
    index = Keys(settings.prefix).cron_queues
    assert r.smembers(index) == {"old"}                 # cron add indexed it
    r.delete(index)                                     # as an older version wrote it
    w = Worker("a,old,b", r, settings=settings, burst=True, defaults=False, middleware=[])
    scheduler = cron.CronScheduler()
    scheduler.on_tick(w)                                # the first tick looks everywhere
    assert r.smembers(index) == {"old"}
    assert len(Queue("old", r, settings=settings, events=False).job_ids()) == 1
    set_due(r, settings, "tick", server_now(r) - 1, queue="old")
    r.delete(index)
    scheduler.on_tick(w)                                # later ticks trust the index
    assert len(Queue("old", r, settings=settings, events=False).job_ids()) == 1


def test_cron_keeps_what_it_can_honour(r, settings):
    for schedule in ("* * * * 5-7", "0 9 * * mon-fri", "* * 31 2 mon", "0 0 29 2 *",
                     "@daily", "*/5 1-3,22-23 * * *"):
        cron.register(r, settings, "ok", schedule, "tests.jobs:noop", queue="crons")


# -- real worker processes -----------------------------------------------------------------


@pytest.mark.slow
def test_three_workers_enqueue_exactly_once_per_tick(r, settings, processes):
    for _ in range(3):
        processes.worker("-q", "default")
    wait_for(lambda: r.scard(Keys(settings.prefix).workers) == 3, timeout=15)
    cron.register(r, settings, "tick", EVERY_SECOND, "tests.jobs:record",
                  args=[settings.redis_url, f"{settings.prefix}:ran", "x"], allow_overlap=True)
    wait_for(lambda: cron.get_entry(r, settings, "tick").runs >= 5, timeout=40)
    # the worker that ran the most ticks so far stops: the others go on, every tick once
    # (counted over the runs some worker took: under load the newest may not be claimed yet)
    ran = wait_for(lambda: collections.Counter(
        j["worker"] for j in cron_jobs(r, settings) if j.get("worker")), timeout=40)
    stopped_name = ran.most_common(1)[0][0]
    [stopped] = [p for p in processes.procs if stopped_name.endswith(f".{p.pid}")]
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(15) == 0, processes.output(stopped)
    runs_then = cron.get_entry(r, settings, "tick").runs
    wait_for(lambda: cron.get_entry(r, settings, "tick").runs >= runs_then + 5, timeout=40)
    # no more ticks, and the ones enqueued ran, before the workers stop (a run enqueued
    # just before a warm shutdown stays queued for the next worker: not lost, not run here)
    cron.pause(r, settings, "tick")
    wait_for(lambda: all(j["status"] == "finished" for j in cron_jobs(r, settings)),
             timeout=20)
    for proc in processes.procs:
        proc.send_signal(signal.SIGTERM)
    for proc in processes.procs:
        assert proc.wait(15) == 0, processes.output(proc)
    jobs = cron_jobs(r, settings)
    dues = sorted(int(j["cron_due"]) for j in jobs)
    assert len(dues) == len(set(dues)), "a due time was enqueued twice"
    assert dues == list(range(dues[0], dues[-1] + 1)), "a tick was missed"
    assert len(dues) >= 10      # one job per due second: no more than the seconds passed
    entry = cron.get_entry(r, settings, "tick")
    assert (entry.runs, entry.skips, entry.misses) == (len(dues), 0, 0)
    # every enqueued run ran exactly once
    assert r.llen(f"{settings.prefix}:ran") == len(dues)
    # the ticks due after the stop were run by the others (none by the stopped one)
    later = [j for j in jobs if int(j["cron_due"]) > dues[0] + runs_then]
    assert later and all(j.get("worker") != stopped_name for j in later)


@pytest.mark.slow
def test_worker_downtime_then_restart_gives_no_burst(r, settings, processes):
    modes = ("skip", "once")
    first = [processes.worker("-q", "default") for _ in range(2)]
    wait_for(lambda: r.scard(Keys(settings.prefix).workers) == 2, timeout=15)
    for mode in modes:
        cron.register(r, settings, mode, EVERY_SECOND, "tests.jobs:noop", catch_up=mode,
                      allow_overlap=True)
    wait_for(lambda: all(cron.get_entry(r, settings, m).runs >= 2 for m in modes), timeout=15)
    for proc in first:
        proc.send_signal(signal.SIGTERM)
    for proc in first:
        assert proc.wait(15) == 0
    # the due time every entry waits on while no worker runs
    parked = {m: cron.get_entry(r, settings, m).next_run for m in modes}
    misses = {m: cron.get_entry(r, settings, m).misses for m in modes}
    # no worker runs while at least three more due times pass
    wait_for(lambda: server_now(r) >= max(parked.values()) + 3, timeout=10, interval=0.1)
    restarted = server_now(r)
    for _ in range(2):
        processes.worker("-q", "default")

    def runs_since_restart(mode: str) -> list[int]:
        return [int(j["cron_due"]) for j in cron_jobs(r, settings)
                if j["cron"] == mode and int(j["cron_due"]) >= restarted]
    wait_for(lambda: all(len(runs_since_restart(m)) >= 2 for m in modes), timeout=20,
             interval=0.1)
    for mode in modes:
        jobs = [j for j in cron_jobs(r, settings) if j["cron"] == mode]
        dues = sorted(int(j["cron_due"]) for j in jobs)
        assert len(dues) == len(set(dues))
        missed = [d for d in dues if parked[mode] <= d < restarted]
        entry = cron.get_entry(r, settings, mode)
        if mode == "skip":
            assert missed == [] and entry.misses == misses[mode] + 1, (dues, parked, restarted)
        else:  # three or more seconds of missed runs became exactly one
            assert missed == [parked[mode]], (dues, parked, restarted)
            assert entry.misses == misses[mode]
            [catch_up] = [j for j in jobs if int(j["cron_due"]) == parked[mode]]
            assert float(catch_up["enqueued_at"]) >= restarted
        after = [d for d in dues if d >= restarted]
        assert len(after) >= 2 and after == list(range(after[0], after[-1] + 1))
