"""Chaos: 4 real workers, 1,000 jobs, random SIGKILLs of parents and horses and SIGSTOPs
of parents (about 15 s on an idle 2-core machine); and on a private Redis, 2 workers,
400 jobs, the same plus TCP partitions, Redis SIGKILL + restarts (AOF, fsync always) and
OOM refusal windows (about 20 s). Each fault phase lasts until every required move
happened; each run ends when every job finished (or fails once none finished for
``STALL`` s).

See ``engine.py`` for the scenario; ``bench/chaos.py`` runs longer versions.
"""

from __future__ import annotations

import pytest

from tests.chaos.engine import run_chaos

#: a run ends when every job finished; it fails when none finished for STALL seconds
#: after the faults (stuck), or at DEADLINE (a limit for a broken run, not a measure:
#: on a loaded machine the same run takes several times longer)
STALL, DEADLINE = 20.0, 240.0


def _every_job_once(result, overlaps_checked: bool = True) -> None:
    """Every job finished, none is missing, and each duplicate run is explained by a
    killed attempt; and (where the jobs hold markers) no two runs of one job overlapped."""
    if overlaps_checked:
        assert result.overlaps == 0                 # no two executions of one job at once
    assert result.finished == result.jobs, result.not_finished
    assert result.missing == 0
    assert result.unexplained_duplicates == []


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_chaos_no_job_lost_duplicates_only_from_killed_attempts(settings, tmp_path):
    # lease 3 s (run_worker.py keeps >= 15 s): a killed parent's job comes back in
    # seconds, so the run can spend most of its minute killing.
    # 1,000 jobs (2,000 before the widened faults test joined it): the suite stays under
    # 10 minutes and the run keeps its margin on a loaded machine; bench/chaos.py runs more
    result = run_chaos(settings, jobs=1000, workers=4, job_seconds=0.01, kill_for=10.0,
                       kill_every=0.35, deadline=DEADLINE, stall=STALL, lease=3.0,
                       log_dir=tmp_path, freeze_for=5.0,
                       require=("parent", "horse", "freeze"))
    print("\n" + result.summary())
    assert result.parent_kills > 0 and result.horse_kills > 0 and result.freezes > 0
    _every_job_once(result)


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_chaos_at_concurrency_4_loses_nothing(settings, tmp_path):
    # 2 workers x 4 slots: a killed parent takes up to 4 running jobs down at once
    result = run_chaos(settings, jobs=600, workers=2, job_seconds=0.01, kill_for=8.0,
                       kill_every=0.35, deadline=DEADLINE, stall=STALL, lease=3.0,
                       log_dir=tmp_path, concurrency=4, require=("parent", "horse"))
    print("\n" + result.summary())
    assert result.parent_kills > 0 and result.horse_kills > 0
    _every_job_once(result, overlaps_checked=False)


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_chaos_with_warm_horses_loses_nothing(settings, tmp_path):
    # --horse-jobs 10: a horse runs up to 10 jobs; a horse kill may hit one running a
    # job or one idle between jobs (which must lose nothing)
    result = run_chaos(settings, jobs=600, workers=2, job_seconds=0.01, kill_for=8.0,
                       kill_every=0.35, deadline=DEADLINE, stall=STALL, lease=3.0,
                       log_dir=tmp_path, concurrency=4, horse_jobs=10,
                       require=("parent", "horse"))
    print("\n" + result.summary())
    assert result.parent_kills > 0 and result.horse_kills > 0
    _every_job_once(result)


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_chaos_with_async_horses_loses_nothing(settings, tmp_path):
    # --async-per-horse 4 at --concurrency 8: a horse runs up to 4 async def jobs at
    # once; a horse kill takes all of them down (shared: given back), a parent kill too
    result = run_chaos(settings, jobs=600, workers=2, job_seconds=0.01, kill_for=8.0,
                       kill_every=0.35, deadline=DEADLINE, stall=STALL, lease=3.0,
                       log_dir=tmp_path, concurrency=8, horse_jobs=10, async_per_horse=4,
                       require=("parent", "horse"))
    print("\n" + result.summary())
    assert result.parent_kills > 0 and result.horse_kills > 0
    _every_job_once(result)


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 60)
@pytest.mark.serial  # CPU-bound, with deadlines: alone, after the parallel part
def test_chaos_with_partitions_redis_restarts_and_oom_windows(settings, tmp_path):
    # a PRIVATE server (it is SIGKILLed, and its maxmemory is changed): AOF, fsync always
    from tests.redis_servers import RestartableRedis

    server = RestartableRedis("--appendonly", "yes", "--appendfsync", "always",
                              "--maxmemory-policy", "noeviction")
    try:
        s = settings.replace(redis_url=server.url)
        # partitions (4 s) outlast the 3 s lease: the others reap the job while the
        # partitioned worker's horse must already be dead
        result = run_chaos(s, jobs=400, workers=2, job_seconds=0.01, kill_for=12.0,
                           kill_every=0.6, deadline=DEADLINE, stall=STALL, lease=3.0,
                           log_dir=tmp_path, freeze_for=4.0, partition_for=4.0,
                           restart_down=1.0, oom_for=2.0, fault_every=1.5, server=server,
                           retry_delay=0.2, require=("parent", "freeze"))
    finally:
        server.stop()
    print("\n" + result.summary())
    if result.not_finished_detail:
        print(result.not_finished_detail)
    # (horse kills are left to chance here: 10 ms jobs, and ~25 moves in 16 s)
    assert result.parent_kills > 0 and result.freezes > 0
    assert result.partitions > 0 and result.redis_restarts > 0 and result.oom_windows > 0
    _every_job_once(result)
