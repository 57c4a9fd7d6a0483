"""Warm horses (``worker --horse-jobs N``, ``@job(horse_jobs=M)``; design.md, "Warm
horses"): one horse runs several jobs, and every per-job guarantee still holds.

Real Redis, real fork server, real horses, real signals. A job says which horse ran it
(its pid) and how many jobs of ``tests.warm_jobs`` that process ran before it (module
state left in the horse): a fresh horse says 0.
"""

from __future__ import annotations

import _asyncio
import os
import signal
import subprocess
import time

import psutil
import pytest

from fusionworker.core.job import FailureReason, Job
from fusionworker.core.registry import JobFunction
from fusionworker.runtime.launch import ForkServerLauncher, LaunchSpec
from fusionworker.runtime.slot import Slot
from tests import warm_jobs
from tests.children import fork_servers_of
from tests.runtime.test_forkserver import answered, spec, until_done
from tests.waiting import gone, processes_of, wait_for

JOBS = "tests.warm_jobs"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _run(q, burst, settings, calls, **worker_kw):
    """Enqueue ``calls`` ((func, args, options) or func) in order, run one burst worker
    with one slot over them; the jobs as Redis holds them afterwards."""
    jobs = []
    for call in calls:
        func, args, options = call if isinstance(call, tuple) else (call, (), {})
        jobs.append(q.enqueue_call(f"{JOBS}:{func}", args=list(args), **options))
    burst(settings=settings, **worker_kw)
    return [q.fetch_job(j.id) for j in jobs]


def test_default_is_a_fresh_horse_per_job(queue, burst, settings):
    done = _run(queue(), burst, settings, ["pid", "pid", "pid"])
    assert [j.status for j in done] == ["finished"] * 3
    assert len({j.result[0] for j in done}) == 3
    assert [j.result[1] for j in done] == [0, 0, 0]


def test_n_jobs_run_in_one_horse_then_it_is_retired(queue, burst, settings):
    done = _run(queue(), burst, settings.replace(horse_jobs=3), ["pid"] * 7)
    assert [j.status for j in done] == ["finished"] * 7
    pids = [j.result[0] for j in done]
    assert pids[0] == pids[1] == pids[2]
    assert pids[3] == pids[4] == pids[5] != pids[0]
    assert pids[6] not in (pids[0], pids[3])
    # the trade: module state one job left is seen by the next job of the same horse
    assert [j.result[1] for j in done] == [0, 1, 2, 0, 1, 2, 0]
    assert all(_gone(pid) for pid in pids)


@pytest.mark.parametrize("horse_jobs", [1, 3])
def test_a_boot_modules_at_fork_hook_sets_up_each_horse_once(queue, burst, settings, horse_jobs):
    """docs/from-celery.md's answer to ``worker_process_init``: a boot module's
    ``os.register_at_fork(after_in_child=...)`` runs in each horse, once, before its
    first job (a fresh horse per job, or a warm one for three), never in the worker."""
    q = queue()
    jobs = [q.enqueue("tests.horse_setup_jobs:whoami") for _ in range(6)]
    burst(settings=settings.replace(horse_jobs=horse_jobs, imports=("tests.horse_setup_jobs",)))
    done = [q.fetch_job(j.id) for j in jobs]
    assert [j.status for j in done] == ["finished"] * 6
    assert all(pid == horse and setups == 1 for pid, horse, setups in (j.result for j in done))
    assert len({j.result[0] for j in done}) == 6 // horse_jobs
    assert os.getpid() not in {j.result[0] for j in done}


def test_a_failure_retires_the_horse(queue, burst, settings, r):
    key = f"{settings.prefix}:warm:failed"
    done = _run(queue(), burst, settings.replace(horse_jobs=10),
                ["pid", ("fail", (settings.redis_url, key), {}), "pid"])
    assert [j.status for j in done] == ["finished", "failed", "finished"]
    failed_in = int(r.lpop(key))
    assert failed_in == done[0].result[0]           # it ran in the warm horse
    assert done[2].result[0] != failed_in and done[2].result[1] == 0   # then a fresh one


def test_meta_and_progress_of_one_job_never_reach_the_next(queue, burst, settings):
    done = _run(queue(), burst, settings.replace(horse_jobs=10),
                [("set_meta", ("first",), {}), "read_meta", ("set_meta", ("third",), {}),
                 "read_meta"])
    assert [j.status for j in done] == ["finished"] * 4
    assert done[0].result == done[1].result[0] == done[2].result == done[3].result[0]
    assert done[1].result[1:] == [{}, None]     # what the second job's context began with
    assert done[3].result[1:] == [{}, None]
    assert done[0].meta == {"tag": "first"} and done[2].meta == {"tag": "third"}
    assert done[1].meta == {} and done[1].progress is None
    assert done[3].meta == {} and done[3].progress is None


def test_a_job_finds_no_thread_or_signal_handler_of_the_previous_one(queue, burst, settings):
    # each job's progress sender thread ends with its job; SIGTERM (what a kill sends
    # first) is the default again though the previous job ignored it
    done = _run(queue(), burst, settings.replace(horse_jobs=10),
                ["progress_then_threads"] * 3)
    assert [j.status for j in done] == ["finished"] * 3
    assert done[0].result[0] == done[1].result[0] == done[2].result[0]
    for job in done:
        others, was_default = job.result[1:]
        assert others.count("fusionworker-progress") == 1
        assert was_default


def test_a_job_that_leaves_a_child_process_retires_its_horse(queue, burst, settings):
    done = _run(queue(), burst, settings.replace(horse_jobs=10), ["pid", "spawn", "pid"])
    assert [j.status for j in done] == ["finished"] * 3
    warm, (spawned_in, child) = done[0].result[0], done[1].result
    assert spawned_in == warm
    assert done[2].result[0] != warm and done[2].result[1] == 0
    wait_for(lambda: _gone(child), timeout=10)     # killed with the retired horse's group


def test_a_function_with_horse_jobs_1_always_gets_a_fresh_horse(queue, burst, settings):
    done = _run(queue(), burst, settings.replace(horse_jobs=10),
                ["pid", "fresh", "fresh", "pid", "fresh"])
    assert [j.status for j in done] == ["finished"] * 5
    warm, fresh = done[0].result[0], [done[1].result, done[2].result, done[4].result]
    assert done[3].result == [warm, 1]              # the warm horse waited meanwhile
    assert len({warm, *fresh}) == 4


def test_a_function_cap_lowers_the_workers(queue, burst, settings):
    # two jobs ran in the warm horse: a horse_jobs=2 job may not be its third
    done = _run(queue(), burst, settings.replace(horse_jobs=10),
                ["pid", "pid", "pair", "pair", "pair"])
    assert [j.status for j in done] == ["finished"] * 5
    warm = done[0].result[0]
    assert done[1].result[0] == warm
    assert done[2].result == done[3].result != warm
    assert done[4].result not in (warm, done[2].result)


def test_rss_past_the_ceiling_retires_the_horse_after_its_job(queue, burst, settings):
    # the burst worker has no middleware: the check after each job alone decides
    done = _run(queue(), burst, settings.replace(horse_jobs=10, max_horse_memory=120),
                [("leak", (0,), {}), ("leak", (0,), {}), ("leak", (150,), {}),
                 ("leak", (0,), {})])
    assert [j.status for j in done] == ["finished"] * 4
    pids = [j.result for j in done]
    assert pids[0] == pids[1] == pids[2]            # under the ceiling: it stays
    assert pids[3] != pids[2]                       # past it after the third: retired


def test_a_timeout_kills_only_its_jobs_horse(processes, queue, r, settings):
    q = queue()
    key = f"{settings.prefix}:warm:pids"
    processes.worker("--customq", "default", "--concurrency", "2", "--horse-jobs", "10")
    warm = [q.enqueue_call(f"{JOBS}:pid") for _ in range(2)]
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in warm), timeout=30)
    long = q.enqueue_call(f"{JOBS}:sleep", args=[settings.redis_url, key, 8])
    late = q.enqueue_call(f"{JOBS}:sleep", args=[settings.redis_url, key, 60, True],
                          timeout=1)
    wait_for(lambda: r.llen(key) == 2, timeout=20)
    wait_for(lambda: q.fetch_job(late.id).status == "failed", timeout=20)
    pids = {int(p) for p in r.lrange(key, 0, -1)}
    assert pids == {q.fetch_job(j.id).result[0] for j in warm}    # both warm horses
    killed = next(p for p in pids if _gone(p))      # its horse died (timeout + grace)
    survivor = (pids - {killed}).pop()
    assert q.fetch_job(late.id).failure_reason == FailureReason.TIMEOUT
    assert not _gone(survivor) and q.fetch_job(long.id).status == "started"
    nxt = q.enqueue_call(f"{JOBS}:pid")              # the one free slot: a fresh horse
    wait_for(lambda: q.fetch_job(nxt.id).status == "finished", timeout=20)
    assert q.fetch_job(nxt.id).result[0] not in pids and q.fetch_job(nxt.id).result[1] == 0
    wait_for(lambda: q.fetch_job(long.id).status == "finished", timeout=20)
    assert q.fetch_job(long.id).result == survivor


def test_sighup_retires_warm_horses(processes, queue, settings):
    q = queue()
    w = processes.worker("--customq", "default", "--horse-jobs", "10")
    first = [q.enqueue_call(f"{JOBS}:pid") for _ in range(2)]
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in first), timeout=30)
    warm = q.fetch_job(first[0].id).result[0]
    assert q.fetch_job(first[1].id).result == [warm, 1]
    w.send_signal(signal.SIGHUP)
    wait_for(lambda: _gone(warm), timeout=20)
    after = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(after.id).status == "finished", timeout=20)
    assert q.fetch_job(after.id).result[0] != warm
    assert q.fetch_job(after.id).result[1] == 0


def test_sigkill_of_an_idle_warm_horse_loses_nothing(processes, queue, settings):
    q = queue()
    processes.worker("--customq", "default", "--horse-jobs", "10")
    first = [q.enqueue_call(f"{JOBS}:pid") for _ in range(2)]
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in first), timeout=30)
    warm = q.fetch_job(first[0].id).result[0]
    assert q.fetch_job(first[1].id).result == [warm, 1]
    os.kill(warm, signal.SIGKILL)                  # idle between jobs
    after = [q.enqueue_call(f"{JOBS}:pid") for _ in range(3)]   # at once, no wait
    wait_for(lambda: all(q.fetch_job(j.id).status in ("finished", "failed") for j in after),
             timeout=30)
    assert [q.fetch_job(j.id).status for j in after] == ["finished"] * 3
    assert all(q.fetch_job(j.id).result[0] != warm for j in after)
    assert [q.fetch_job(j.id).status for j in first] == ["finished"] * 2


def test_a_warm_horse_killed_before_it_took_its_job_hands_it_on() -> None:
    # launcher level, deterministic: the idle warm horse is stopped, so the job written
    # to its pipe is never read; it is killed; the server hands the job to another
    # horse and the worker's slot follows it (protocol.MovedNotice)
    ln = ForkServerLauncher(spec(warm=lambda: {"horse_jobs": 10, "max_rss_mib": 0}))
    ln.start()
    try:
        def one(job_id: str):
            job = Job(id=job_id, queue="q", func=f"{JOBS}:pid", args=[], timeout=10)
            [slot] = ln.launch([job], [0], lambda: None)
            return slot

        first = one("a")
        until_done(ln, [first])
        second = one("b")                  # the warm horse: its module is loaded now
        until_done(ln, [second])
        warm = first.pid
        assert second.pid == warm and second.outcome(cold=False).ok
        os.kill(warm, signal.SIGSTOP)
        third = one("c")
        answered(ln, [third])
        assert third.pid == warm           # handed to the stopped horse
        os.kill(warm, signal.SIGKILL)
        until_done(ln, [third], timeout=20)
        exit_ = third.outcome(cold=False)
        assert exit_.ok, exit_
        assert third.pid != warm
        assert exit_.result_json is not None and str(third.pid) in exit_.result_json
    finally:
        ln.close()


def test_horse_jobs_of_a_function_is_checked_and_kept() -> None:
    assert warm_jobs.pair.horse_jobs == 2 and warm_jobs.pair.options(priority=3).horse_jobs == 2
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="horse_jobs"):
            JobFunction(warm_jobs.leak, horse_jobs=bad)


def _is_fork_server(proc: psutil.Process) -> bool:
    """A running fork server (a child that ended and is not reaped yet, a zombie, has no
    command line to read: it serves nobody)."""
    try:
        return "fork server" in " ".join(proc.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return False


def _horses(worker_pid: int) -> list[int]:
    """The pids of the fork server's children (the horses, waiting or running)."""
    server = [c for c in psutil.Process(worker_pid).children() if _is_fork_server(c)]
    alive = []
    for horse in (h for s in server for h in s.children()):
        try:
            if horse.status() != psutil.STATUS_ZOMBIE:
                alive.append(horse.pid)
        except psutil.NoSuchProcess:       # reaped meanwhile
            pass
    return alive


def test_warm_horses_are_forked_ahead_one_per_slot_and_replaced(processes, queue):
    # a prefork pool: with --horse-jobs > 1 the server keeps one horse per slot alive,
    # forked before the jobs come; a horse that retires (here after 2 jobs) is replaced
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "3", "--horse-jobs", "2")
    first = q.enqueue_call(f"{JOBS}:pid")       # loads the module in the server
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    wait_for(lambda: len(_horses(w.pid)) == 3, timeout=20)
    warm = q.fetch_job(first.id).result[0]
    assert warm in _horses(w.pid)                # idle, one of the three
    retiring = processes_of([warm])              # taken before: its pid may be reused
    nxt = q.enqueue_call(f"{JOBS}:pid")          # its second job: then it retires
    wait_for(lambda: q.fetch_job(nxt.id).status == "finished", timeout=30)
    assert q.fetch_job(nxt.id).result == [warm, 1]
    wait_for(lambda: gone(retiring), timeout=20)
    wait_for(lambda: len(_horses(w.pid)) == 3, timeout=20)   # replaced, forked ahead


def test_async_horses_keep_one_ready_not_the_whole_pool(processes, queue):
    # --async-per-horse K: a horse takes K jobs, so the server keeps one horse ready
    # beyond those in use (up to C / K), not C / K forked ahead; a burst that needs
    # more gets them forked then, and every job runs
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "40", "--horse-jobs",
                         "100", "--async-per-horse", "10", "--import", "tests.jobs")
    wait_for(lambda: _horses(w.pid), timeout=20)
    time.sleep(0.5)
    assert len(_horses(w.pid)) == 1                  # not the pool's 4
    # asyncio and the async horse's code were imported by the server before it forked,
    # once for all its horses (each would take 3 MiB of its own importing them)
    [server] = [c for c in psutil.Process(w.pid).children() if _is_fork_server(c)]
    library = getattr(_asyncio, "__file__", None)
    if library is not None:                          # (a build with _asyncio built in)
        with open(f"/proc/{server.pid}/maps") as maps:
            assert library in maps.read()
    jobs = q.enqueue_many([q.prepare("tests.async_horse_jobs:stamp", 1.5) for _ in range(25)])
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in jobs), timeout=30)
    pids = [q.fetch_job(j.id).result[0] for j in jobs]
    assert 3 <= len(set(pids)) < 25                  # at K = 10: three horses at least, shared


def test_fresh_horses_are_not_forked_one_per_slot(processes, queue):
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "3")
    first = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    wait_for(lambda: len(_horses(w.pid)) == 1, timeout=20)    # READY_MAX logic: one ahead


def test_horse_jobs_is_reloaded_on_sighup(processes, queue, tmp_path):
    # FUSIONWORKER_HORSE_JOBS from the -c file: 1 (a fresh horse per job), then 10 and
    # SIGHUP: the new fork server's horses run several jobs each
    config = tmp_path / "worker.env"
    config.write_text("FUSIONWORKER_HORSE_JOBS=1\n")
    q = queue()
    w = processes.start("-c", str(config), "worker", "--customq", "default")

    def one() -> list[int]:
        job = q.enqueue_call(f"{JOBS}:pid")
        wait_for(lambda: q.fetch_job(job.id).status == "finished", timeout=30)
        return q.fetch_job(job.id).result

    before = [one() for _ in range(3)]
    assert len({pid for pid, _ in before}) == 3 and [n for _, n in before] == [0, 0, 0]
    config.write_text("FUSIONWORKER_HORSE_JOBS=10\n")
    w.send_signal(signal.SIGHUP)
    wait_for(lambda: "horse_jobs=10" in processes.output(w), timeout=20)
    after = [one() for _ in range(3)]
    assert after[1][0] == after[2][0] and after[2][1] == after[1][1] + 1   # a warm horse


def test_the_import_modules_are_loaded_before_the_pool_is_forked(processes, queue):
    # --import: the fork server imports the module before its first horse, so the pool
    # forked at start runs the first job and is not retired and forked again after it
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "2", "--horse-jobs", "10",
                         "--import", JOBS)
    wait_for(lambda: len(_horses(w.pid)) == 2, timeout=20)
    pool = set(_horses(w.pid))
    first = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    assert q.fetch_job(first.id).result[0] in pool
    nxt = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(nxt.id).status == "finished", timeout=30)
    assert q.fetch_job(nxt.id).result == [q.fetch_job(first.id).result[0], 1]
    assert set(_horses(w.pid)) == pool       # the same two horses, none forked again
    assert "not named with --import" not in processes.output(w)


def test_a_killed_fork_server_takes_its_pool_and_a_new_one_serves(processes, queue):
    # the crash point of the pool: SIGKILL of the fork server between jobs. Its waiting
    # horses die with it (PDEATHSIG); the next job gets a new server and a new pool
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "2", "--horse-jobs", "10")
    first = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(first.id).status == "finished", timeout=30)
    wait_for(lambda: len(_horses(w.pid)) == 2, timeout=20)
    [server] = fork_servers_of(w.pid)
    pool = processes_of(_horses(w.pid))
    server.kill()
    wait_for(lambda: gone(pool), timeout=20)
    after = q.enqueue_call(f"{JOBS}:pid")
    wait_for(lambda: q.fetch_job(after.id).status == "finished", timeout=30)
    assert q.fetch_job(after.id).result[0] not in {p.pid for p in pool}
    assert q.fetch_job(first.id).status == "finished"        # nothing recorded twice
    assert w.poll() is None


def test_an_allowed_module_is_loaded_by_the_server_not_by_each_horse(monkeypatch, tmp_path):
    # no silent cold start (launcher level): the first job of a module nobody named with
    # --import has the fork server import it before that job's horse is forked, so no
    # horse imports it itself; a module the allow-list refuses is imported by nobody
    markers = tmp_path / "imports"
    markers.mkdir()
    monkeypatch.setenv("FW_TEST_IMPORT_MARKERS", str(markers))

    def launcher(allowed: tuple[str, ...]) -> ForkServerLauncher:
        ln = ForkServerLauncher(LaunchSpec(
            allowed=allowed, retryable=(), entries=8, deliver=lambda job, frame: None,
            warm=lambda: {"horse_jobs": 10, "max_rss_mib": 0}))
        ln.start()
        return ln

    def run(ln: ForkServerLauncher, n: int) -> list[Slot]:
        jobs = [Job(id=f"j{i}", queue="q", func="tests.marker_jobs:pid", args=[], timeout=10)
                for i in range(n)]
        slots = ln.launch(jobs, list(range(n)), lambda: None)
        until_done(ln, slots)
        return slots

    refused = launcher(("tests.jobs",))
    try:
        [slot] = run(refused, 1)
        assert slot.outcome(cold=False).reason == FailureReason.REFUSED
    finally:
        refused.close()
    assert list(markers.iterdir()) == []
    allowed = launcher(("tests",))
    try:
        assert allowed.server is not None and allowed.server.proc is not None
        server = allowed.server.proc.pid
        # an allowed module that cannot be imported: its job fails, the server goes on
        [missing] = allowed.launch([Job(id="m", queue="q", func="tests.no_such_module:f",
                                        args=[], timeout=10)], [7], lambda: None)
        until_done(allowed, [missing])
        gone_wrong = missing.outcome(cold=False)
        assert not gone_wrong.ok and gone_wrong.error_type == "ModuleNotFoundError", gone_wrong
        slots = run(allowed, 2) + run(allowed, 2)
        assert all(s.outcome(cold=False).ok for s in slots)
        horses = {s.pid for s in slots}
        assert len(horses) <= 2          # the second pair ran in the first pair's horses
        assert [p.name for p in markers.iterdir()] == [str(server)]
    finally:
        allowed.close()


def test_horse_jobs_without_import_runs_the_first_jobs_in_warm_horses(processes, queue,
                                                                      tmp_path):
    # the same through a real worker: --horse-jobs without --import; the pool (one horse
    # per slot) is forked once the server loaded the module, the jobs reuse their horses
    markers = tmp_path / "imports"
    markers.mkdir()
    q = queue()
    w = processes.worker("--customq", "default", "--concurrency", "2", "--horse-jobs", "10",
                         env={"FW_TEST_IMPORT_MARKERS": str(markers)})
    wait_for(lambda: len(_horses(w.pid)) == 1, timeout=20)     # no module known: one horse
    jobs = [q.enqueue_call("tests.marker_jobs:pid") for _ in range(6)]
    wait_for(lambda: all(q.fetch_job(j.id).status == "finished" for j in jobs), timeout=30)
    pids = {q.fetch_job(j.id).result for j in jobs}
    [server] = [c for c in psutil.Process(w.pid).children() if _is_fork_server(c)]
    assert [p.name for p in markers.iterdir()] == [str(server.pid)]
    assert len(pids) <= 2 and server.pid not in pids
    wait_for(lambda: len(_horses(w.pid)) == 2, timeout=20)     # the pool, with the module
    said = [line for line in processes.output(w).splitlines() if "not named with --import" in line]
    assert len(said) == 1 and "tests.marker_jobs" in said[0], said     # once, naming it


def test_large_requests_and_large_reports_at_once_never_wedge_worker_and_server(queue,
                                                                                 processes):
    """600 jobs of 30 KB arguments that return them, at concurrency 100 on warm horses: the
    worker sends a turn's requests (MBs) while the fork server sends it the reports of the
    last turn (MBs). Both sockets filled, each blocked in its send, nobody read: both hung
    for good. The server now reads the worker's requests while its own send would block."""
    q = queue()
    big = "x" * 30000
    jobs = [q.enqueue("tests.jobs:identity", big) for _ in range(600)]
    proc = processes.worker("--customq", "default", "--burst", "--concurrency", "100",
                            "--horse-jobs", "100")
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker hung: {q.count} of 600 jobs still queued") from None
    assert code == 0, processes.output(proc)[-2000:]
    assert {q.fetch_job(j.id).status for j in jobs} == {"finished"}
    assert q.fetch_job(jobs[-1].id).result == big


def test_a_daemon_a_job_left_retires_its_warm_horse(queue, burst, settings):
    """A double-forked daemon (setsid: out of the horse's group) holding the horse's
    pipes becomes the warm horse's child (a child subreaper), so the horse retires
    after that job instead of running the next one beside it (it could read the next
    job's frame or write its report)."""
    q = queue()
    left = q.enqueue("tests.hostile_jobs:daemon_on_pipes", 3.0)
    after = q.enqueue("tests.hostile_jobs:pid")
    burst(settings=settings.replace(concurrency=1, horse_jobs=5))
    first, second = q.fetch_job(left.id), q.fetch_job(after.id)
    assert (first.status, second.status) == ("finished", "finished")
    assert first.result != second.result           # the next job had a fresh horse


@pytest.mark.parametrize("names", ["own", "none"])
def test_a_report_a_job_wrote_itself_shifts_no_later_jobs_outcome(queue, burst, settings,
                                                                  names):
    """A job of a warm horse writes a report of its own, then returns: its horse's true
    report came while the next job ran, and was taken for it (every later job got the
    result of the one before). Each report names its job: one for another job kills the
    horse, and that job goes back uncharged; one naming none is unreadable."""
    q = queue()
    forger = q.enqueue("tests.hostile_jobs:forged_report", names, 1.0)
    after = [q.enqueue("tests.hostile_jobs:pid_after", 0.2) for _ in range(3)]
    burst(settings=settings.replace(concurrency=1, horse_jobs=5))
    done = [q.fetch_job(j.id) for j in after]
    assert [j.status for j in done] == ["finished"] * 3, [j.error_message for j in done]
    assert all(isinstance(j.result, list) and len(j.result) == 1 for j in done), \
        [j.result for j in done]
    assert [j.attempts for j in done] == [1, 1, 1]
    first = q.fetch_job(forger.id)
    if names == "none":
        assert (first.status, first.error_type) == ("failed", "UnreadableReport")
