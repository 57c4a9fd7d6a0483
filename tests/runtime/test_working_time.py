"""A job's duration (and so the worker's ``total_working_time``) counts the job's run,
not the fork server's start-up: the first job of a worker whose fork server takes 6 s
to start ran for far less than that."""

from __future__ import annotations

from tests.slow_import_jobs import SERVER_START
from tests.waiting import wait_for


def test_the_first_job_is_not_charged_the_fork_servers_start_up(processes, queue):
    q = queue("slowimport")
    job = q.enqueue("tests.slow_import_jobs:quick")
    proc = processes.worker("-q", "slowimport", "--burst", "--import", "tests.slow_import_jobs",
                            env={"FUSIONWORKER_OTEL": "on",
                                 "FUSIONWORKER_OTEL_SETUP":
                                     "tests.slow_import_jobs:slow_server_setup"})
    wait_for(lambda: proc.poll() is not None, timeout=120, what="the burst worker ended")
    done = q.fetch_job(job.id)
    assert done.status == "finished", processes.output(proc)
    # the fork server slept SERVER_START seconds before it could fork the job's horse;
    # the job itself returns at once: its duration is its horse's, not that wait
    assert done.duration < SERVER_START, done.duration
