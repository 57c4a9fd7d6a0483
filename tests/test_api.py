"""The Python API as users call it: plain redis-py clients, Queue per call, enqueue that
never raises after the write, Job.wait/refresh, tagged JSON, the typing marker."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
import redis

import fusionworker
from fusionworker import (
    JobCanceled,
    JobFailed,
    JobWaitTimeout,
    Queue,
    UnsupportedType,
    Worker,
    admin,
    health,
)
from fusionworker.core.queue import known_queues, scripts_for
from tests.conftest import ROOT, worker_env
from tests.waiting import wait_for

RICH = {
    "when": datetime(2026, 11, 23, 8, 0, 1, 250, tzinfo=timezone(timedelta(hours=2))),
    "naive": datetime(2026, 1, 2, 3, 4, 5),
    "day": date(2026, 2, 28),
    "amount": Decimal("12.50"),
    "id": uuid.UUID("6f1c2a9e-8f3b-4c1d-9e2a-0b1c2d3e4f50"),
    "blob": b"\x00\xffraw",
    "tags": {"a", "b"},
    "frozen": frozenset({1, 2}),
    "nested": [{"deep": {Decimal("1.5"), "x"}}],
    "__fw__": "a user's own key",
}


# -- 2. any redis-py client ------------------------------------------------------------


def test_a_plain_bytes_client_works_end_to_end(redis_url, settings, processes):
    plain = redis.Redis.from_url(redis_url)                 # decode_responses=False
    q = Queue("bytes", plain, settings=settings)
    job = q.enqueue("tests.jobs:add", 2, 3)
    assert job.status == "queued" and job.args == [2, 3]
    assert q.fetch_job(job.id).func == "tests.jobs:add"
    assert q.stats()["pending"] == 1 and q.job_ids() == [job.id]
    assert "bytes" in known_queues(plain, settings.prefix)
    proc = processes.worker("--customq", "bytes")
    assert job.wait(30).result == 5
    # admin and health on the same bytes client
    now = admin.server_time(plain)
    live = admin.workers(plain, settings.prefix)
    assert [admin.describe_worker(w, now)["pid"] for w in live] == [proc.pid]
    assert health.check(plain, settings.prefix, ["bytes"]).ok
    admin.suspend(plain, settings.prefix)
    assert admin.is_suspended(plain, settings.prefix)
    admin.resume(plain, settings.prefix)
    assert admin.stuck_jobs(plain, "bytes", settings.prefix) == []
    plain.close()


def test_an_in_process_worker_takes_a_bytes_client(redis_url, settings):
    plain = redis.Redis.from_url(redis_url)
    q = Queue("bytes2", plain, settings=settings)
    job = q.enqueue("tests.jobs:echo", "x", k=1)
    w = Worker("bytes2", plain, settings=settings, burst=True, defaults=False, middleware=[])
    assert w.work() == 0
    assert q.fetch_job(job.id).result == {"args": ["x"], "kwargs": {"k": 1}}


# -- 3. Queue per call ---------------------------------------------------------------


def test_a_thousand_per_call_queues_leave_a_bounded_number_of_connections(redis_url, settings, r):
    name = f"fwleak{uuid.uuid4().hex[:8]}"
    s = settings.replace(redis_url=f"{redis_url}?client_name={name}")
    for i in range(1000):
        Queue("leak", settings=s).enqueue("tests.jobs:noop", job_id=f"j{i}")
    assert Queue("leak", settings=s).count == 1000
    mine = [c for c in r.client_list() if c.get("name") == name]
    assert 1 <= len(mine) <= 3, len(mine)


def test_a_per_call_queue_sees_a_changed_environment(monkeypatch, redis_url):
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("FUSIONWORKER_PREFIX", "one")
    assert Queue("x").settings.prefix == "one"
    monkeypatch.setenv("FUSIONWORKER_PREFIX", "two")
    assert Queue("x").settings.prefix == "two"
    monkeypatch.delenv("FUSIONWORKER_PREFIX")
    assert Queue("x").settings.prefix == "fw"


def test_scripts_cache_does_not_keep_clients_alive(redis_url):
    import gc
    import weakref

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    scripts_for(client)
    ref = weakref.ref(client)
    del client
    gc.collect()
    assert ref() is None


# -- 4. enqueue never raises after the write ---------------------------------------------


class _BrokenSink:
    def emit(self, event):
        raise RuntimeError("the event sink is down")


def test_an_event_failure_after_the_write_is_logged_not_raised(r, settings, caplog):
    q = Queue("obs", r, settings=settings, events=_BrokenSink())
    job = q.enqueue("tests.jobs:noop")
    assert q.count == 1 and q.fetch_job(job.id).status == "queued"
    assert "the event sink is down" in caplog.text


def test_elasticsearch_url_without_the_client_does_not_fail_enqueue(settings, r):
    """A producer process with ELASTICSEARCH_URL set and no elasticsearch package."""
    code = (
        "import sys; sys.modules['elasticsearch'] = None\n"
        "from fusionworker import Queue\n"
        "job = Queue('es').enqueue('tests.jobs:noop', job_id='only-once')\n"
        "q = Queue('es')\n"
        "many = q.enqueue_many([q.prepare('tests.jobs:noop') for _ in range(3)])\n"
        "print(job.id, len(many))\n"
    )
    env = worker_env(settings, ELASTICSEARCH_URL="http://127.0.0.1:9")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "only-once 3"
    assert "elasticsearch client is not installed" in proc.stderr
    assert Queue("es", r, settings=settings).count == 4


def test_validation_happens_before_the_write(r, settings, prefix):
    q = Queue("val", r, settings=settings, events=False)
    with pytest.raises(ValueError):
        q.enqueue("tests.jobs:noop", timeout=-1)
    with pytest.raises(UnsupportedType):
        q.enqueue("tests.jobs:echo", object())
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


# -- 5. waiting ----------------------------------------------------------------------------


def test_wait_returns_the_finished_job_and_raises_the_failure(r, settings, processes):
    q = Queue("wait", r, settings=settings)
    processes.worker("--customq", "wait")
    ok = q.enqueue("tests.jobs:sleep", 0.3)
    assert ok.status == "queued"
    assert ok.wait(30) is ok and ok.status == "finished" and ok.result == 0.3
    done = q.enqueue("tests.jobs:add", 1, 2)
    wait_for(lambda: q.fetch_job(done.id).status == "finished")   # before anyone waits
    assert done.wait(5).result == 3
    bad = q.enqueue("tests.jobs:boom", "nope")
    with pytest.raises(JobFailed) as info:
        bad.wait(30)
    assert info.value.reason == "exception" and info.value.error_type == "ValueError"
    assert "nope" in info.value.error_message and "raise ValueError" in info.value.traceback
    assert info.value.job.status == "failed" and "ValueError: nope" in str(info.value)


def test_wait_times_out_and_sees_a_cancel(r, settings):
    q = Queue("idle", r, settings=settings)   # no worker serves it
    job = q.enqueue("tests.jobs:noop")
    started = time.monotonic()
    with pytest.raises(JobWaitTimeout) as info:
        job.wait(0.3)
    assert time.monotonic() - started >= 0.3 and info.value.job.status == "queued"
    assert not isinstance(info.value, fusionworker.JobTimeoutError)
    other = q.enqueue("tests.jobs:noop")

    import threading
    threading.Timer(0.3, q.cancel, args=(other.id,)).start()
    with pytest.raises(JobCanceled):
        other.wait(10)


def test_refresh_reads_the_job_again(r, settings, burst):
    q = Queue("ref", r, settings=settings)
    job = q.enqueue("tests.jobs:add", 4, 4)
    burst("ref")
    assert job.status == "queued"
    assert job.refresh() is job and job.status == "finished" and job.result == 8


# -- 6. tagged JSON ----------------------------------------------------------------------


def test_rich_arguments_and_results_round_trip_through_a_worker(r, settings, burst):
    q = Queue("rich", r, settings=settings)
    job = q.enqueue("tests.jobs:echo", RICH["when"], RICH["blob"], **RICH)
    assert q.fetch_job(job.id).kwargs == RICH
    burst("rich")
    result = q.fetch_job(job.id).result
    assert result == {"args": [RICH["when"], RICH["blob"]], "kwargs": RICH}
    assert result["kwargs"]["when"].utcoffset() == timedelta(hours=2)
    assert isinstance(result["kwargs"]["frozen"], frozenset)


def test_unsupported_types_are_refused_with_the_argument_named(r, settings, prefix, burst):
    q = Queue("rich", r, settings=settings)
    with pytest.raises(UnsupportedType, match=r"args\[1\].*complex"):
        q.enqueue("tests.jobs:echo", 1, 2j)
    with pytest.raises(UnsupportedType, match=r"kwargs\['when'\]\['at'\].*object"):
        q.enqueue("tests.jobs:echo", when={"at": object()})
    with pytest.raises(UnsupportedType, match="key of type int"):
        q.enqueue("tests.jobs:echo", {1: "x"})
    assert list(r.scan_iter(match=f"{prefix}:*")) == []
    job = q.enqueue("tests.jobs:not_serializable")
    burst("rich")
    failed = q.fetch_job(job.id)
    assert failed.status == "failed" and failed.error_type == "ResultNotSerializable"
    assert "return value" in failed.error_message


# -- 7. typing -------------------------------------------------------------------------------


def test_the_package_ships_py_typed():
    assert (Path(fusionworker.__file__).parent / "py.typed").is_file()
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "py.typed" in cfg["options.package_data"]["fusionworker"]


TYPED_SNIPPET = """
from fusionworker import Job, Queue, job
from fusionworker.exceptions import JobFailed


@job(queue="sms")
def send(number: str, body: str) -> int:
    return 1


j = send.enqueue("+1", body="x")
reveal_type(j)
reveal_type(j.wait(1).result)
reveal_type(send("+1", "b"))
send.enqueue(1, body="x")
reveal_type(Queue("x").fetch_job("id"))
reveal_type(j.cancel())
reveal_type(Job.fetch("id"))
try:
    j.wait()
except JobFailed as exc:
    reveal_type(exc.job.failure_reason)
    reveal_type(exc.job.refresh().error)
    exc.job.requeue()
    exc.job.no_such_field
"""


@pytest.mark.slow
def test_a_type_checker_sees_the_handle_and_job_types(tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "snippet.py").write_text(TYPED_SNIPPET)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache"), "snippet.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "MYPYPATH": str(ROOT)})
    out = proc.stdout
    assert 'Revealed type is "fusionworker.core.job.Job[builtins.int]"' in out or \
        'Revealed type is "fusionworker.core.job.Job[int]"' in out, out
    assert 'Revealed type is "int | None"' in out or 'builtins.int | None' in out, out
    assert 'has incompatible type "int"; expected "str"' in out, out
    assert "Job[Any] | None" in out, out
    # a job's calls give it back with its type; the exceptions' job has the Job's names
    assert out.count("Job[builtins.int]") + out.count("Job[int]") >= 2, out
    assert 'Revealed type is "fusionworker.core.job.Job[Any]"' in out, out
    assert "FailureReason | None" in out, out
    assert 'Revealed type is "builtins.str | None"' in out or \
        'Revealed type is "str | None"' in out, out
    assert '"JobView" has no attribute "no_such_field"' in out, out
    assert out.count("error:") == 2, out      # the int for a str, and no_such_field


# -- 8. docs/api.md --------------------------------------------------------------------------


def test_the_documented_modules_import_by_their_path_as_the_same_module():
    """docs/api.md writes ``fusionworker.health.check`` and ``fusionworker.otel.instrument``:
    ``import fusionworker.health`` works as ``from fusionworker import health`` does, and
    gives the one module (no second copy with state of its own)."""
    code = ("import importlib, fusionworker\n"
            "for name in ('admin', 'codec', 'health', 'otel', 'command', 'registries'):\n"
            "    by_path = importlib.import_module('fusionworker.' + name)\n"
            "    assert by_path is getattr(fusionworker, name), name\n"
            "    assert by_path.__name__.startswith('fusionworker.'), by_path.__name__\n"
            "    assert not by_path.__name__ == 'fusionworker.' + name, by_path.__name__\n"
            "import fusionworker.health as h, fusionworker.ops.health as real\n"
            "assert h is real\n"
            "try:\n"
            "    importlib.import_module('fusionworker.nothing')\n"
            "except ModuleNotFoundError:\n"
            "    print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_api_reference_covers_every_public_name_with_an_example():
    text = (ROOT / "docs" / "api.md").read_text()
    for name in fusionworker.__all__:
        if name == "__version__":
            continue
        assert f"`{name}" in text, name
    assert text.count("```python") >= len(fusionworker.__all__) - 1


@pytest.mark.slow
def test_the_readme_use_it_example_runs(settings, processes, tmp_path):
    """README "Use it": app/tasks.py with @job, enqueue.py, a worker with --import."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Use it"):]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(blocks[0].split("\n", 1)[1])
    (tmp_path / "enqueue.py").write_text(blocks[1])
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    proc = processes.worker("--customq", "sms", "--import", "app.tasks",
                            env={"PYTHONPATH": path, "FUSIONWORKER_ALLOWED_MODULES": ""})
    out = subprocess.run([sys.executable, "enqueue.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env=worker_env(settings, PYTHONPATH=path))
    assert out.returncode == 0, (out.stderr, processes.output(proc))
    assert out.stdout.strip() == "sent 'hi' to +1555"
