"""Default deny: only registered or allow-listed functions run; names that would run a
command are refused at enqueue (nothing written) and again in a real worker (no fork)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import fusionworker
from fusionworker import FunctionNotAllowed, Queue, register
from fusionworker.core.functions import resolve
from fusionworker.exceptions import InvalidFunction
from tests.conftest import ROOT, worker_env
from tests.registered_jobs import plain_handle, shout


def _keys(r, prefix):
    return sorted(r.scan_iter(match=f"{prefix}:*"))


def _dangerous(marker):
    """(func, args) pairs that run a command or write a file if ever called."""
    cmd = f"touch {marker}"
    return [
        ("posix:system", [cmd]),
        ("os:system", [cmd]),
        ("subprocess:call", [["touch", str(marker)]]),
        ("subprocess:getoutput", [cmd]),
        ("io:open", [str(marker), "w"]),
        ("webbrowser:open", [f"file://{marker}"]),
        ("_posixsubprocess:fork_exec", []),
        ("pty:spawn", [["touch", str(marker)]]),
        ("tests.jobs:os.system", [cmd]),               # an import of an allowed module
        ("tests:jobs.os.system", [cmd]),               # a submodule, then its import
        ("tests.registered_jobs:os.system", [cmd]),
        ("tests.jobs:redis.Redis", []),                # a class defined elsewhere
        ("tests.jobs:ctypes.CDLL", [None]),
        ("tests.jobs:signal.raise_signal", [9]),
        ("tests.jobs:time.sleep", [0]),
    ]


@pytest.mark.parametrize("allowed", [(), ("tests",)])
def test_enqueue_refuses_names_that_run_commands_and_writes_nothing(r, settings, prefix, tmp_path,
                                                                   allowed):
    marker = tmp_path / "marker"
    q = Queue("sec", r, settings=settings.replace(allowed_modules=allowed), events=False)
    for func, args in _dangerous(marker):
        with pytest.raises((FunctionNotAllowed, InvalidFunction), match=func.split(":")[0]):
            q.enqueue(func, *args)
    # dunders and privates are not even valid names
    for func in ("tests.jobs:__class__", "tests.jobs:add.__globals__", "tests.jobs:_redis",
                 "tests:__builtins__", "tests.jobs:add.__call__"):
        with pytest.raises(InvalidFunction):
            q.enqueue(func)
    assert _keys(r, prefix) == []
    assert not marker.exists()


def test_attribute_walk_allows_only_what_the_allowed_module_defines():
    allowed = ("tests",)
    assert resolve("tests.jobs:add", allowed)(1, 2) == 3
    for ref in ("tests.jobs:os.system", "tests:jobs.add", "tests.jobs:redis.Redis",
                "tests.jobs:Retry", "tests.jobs:time.sleep"):
        with pytest.raises(FunctionNotAllowed):
            resolve(ref, allowed)
    # a class's function defined in the allowed module runs; what the class inherits does not
    assert resolve("tests.registered_jobs:Greeter.hello", allowed)("x") == "hello x"
    for ref in ("tests.registered_jobs:Greeter.mro", "tests.registered_jobs:Greeter.hello.mro",
                "tests.registered_jobs:shout.func.mro"):
        with pytest.raises((FunctionNotAllowed, InvalidFunction)):
            resolve(ref, allowed)
    # fusionworker.Retry is imported into tests.jobs, defined in fusionworker.exceptions
    with pytest.raises(FunctionNotAllowed, match="fusionworker.exceptions"):
        resolve("tests.jobs:Retry", allowed)
    # a registered reference must lead to the registered function itself
    assert resolve("tests.registered_jobs:shout", ("tests.registered_jobs:shout",))("a") == "A"
    with pytest.raises(FunctionNotAllowed):
        resolve("tests.registered_jobs:touch", ("tests.registered_jobs:shout",))
    with pytest.raises(FunctionNotAllowed):
        resolve("tests.registered_jobs:os.system", ("tests.registered_jobs:os.system",))


def test_a_real_worker_refuses_records_written_straight_into_redis(r, settings, processes,
                                                                  tmp_path):
    """An attacker who can write to Redis: the worker fails each job as refused, no fork."""
    marker = tmp_path / "marker"
    q = Queue("sec", r, settings=settings, events=False)
    ids = []
    for n, (func, args) in enumerate(_dangerous(marker)):
        job_id = f"evil{n}"
        r.hset(q.qkeys.job(job_id), mapping={
            "id": job_id, "queue": "sec", "func": func, "args": json.dumps(args),
            "kwargs": "{}", "timeout": "5", "status": "queued", "attempts": "0",
            "max_retries": "0"})
        r.zadd(q.qkeys.pending, {job_id: 2**42 - n})
        ids.append(job_id)
    r.sadd(q.keys.queues, "sec")
    proc = processes.worker("--customq", "sec", "--burst")
    assert proc.wait(60) == 0, processes.output(proc)
    for job_id in ids:
        job = q.fetch_job(job_id)
        assert job.status == "failed", (job.func, job.status, job.error)
        assert job.failure_reason == "refused", (job.func, job.failure_reason, job.error)
        assert job.attempts == 1
    assert not marker.exists()


def test_registered_functions_run_with_no_allow_list(r, settings, processes, tmp_path):
    """A worker with FUSIONWORKER_ALLOWED_MODULES unset runs what FUSIONWORKER_IMPORTS registers,
    and nothing else of that module."""
    marker = tmp_path / "marker"
    s = settings.replace(allowed_modules=())
    q = Queue("reg", r, settings=s, events=False)
    ok = shout.options(queue=q).enqueue("hi")
    ok2 = plain_handle.options(queue=q).enqueue("x")
    by_string = q.enqueue("tests.registered_jobs:shout", "str")
    # written straight into Redis: an unregistered function of the same module
    r.hset(q.qkeys.job("evil"), mapping={
        "id": "evil", "queue": "reg", "func": "tests.registered_jobs:touch",
        "args": json.dumps([str(marker)]), "kwargs": "{}", "timeout": "5", "status": "queued"})
    r.zadd(q.qkeys.pending, {"evil": 2**42})
    proc = processes.worker("--customq", "reg", "--burst", env={
        "FUSIONWORKER_ALLOWED_MODULES": "", "FUSIONWORKER_IMPORTS": "tests.registered_jobs"})
    assert proc.wait(60) == 0, processes.output(proc)
    assert q.fetch_job(ok.id).result == "HI"
    assert q.fetch_job(ok2.id).result == "x"
    assert q.fetch_job(by_string.id).result == "STR"
    evil = q.fetch_job("evil")
    assert evil.failure_reason == "refused" and not marker.exists()
    # the producer refuses the unregistered one
    with pytest.raises(FunctionNotAllowed):
        q.enqueue("tests.registered_jobs:touch", str(marker))


@pytest.mark.slow  # starts the product's processes itself (tests/README.md)
def test_worker_import_flag_and_the_one_line_refusal(settings):
    base = [sys.executable, str(ROOT / "run_worker.py"), "worker", "--burst"]
    env = worker_env(settings, FUSIONWORKER_ALLOWED_MODULES="")
    refused = subprocess.run(base, env=env, capture_output=True, text=True, timeout=60,
                             cwd=str(ROOT))
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "FUSIONWORKER_IMPORTS" in refused.stderr
    started = subprocess.run(base + ["--import", "tests.registered_jobs"], env=env,
                             capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert started.returncode == 0, started.stderr
    bad = subprocess.run(base + ["--import", "tests.no_such_module"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert bad.returncode == 1 and "tests.no_such_module" in bad.stderr


def test_the_typed_handle_is_also_a_plain_function(r, settings, burst):
    assert shout("abc") == "ABC"
    assert shout.ref == "tests.registered_jobs:shout" and shout.__name__ == "shout"
    q = Queue("reg", r, settings=settings, events=False)
    job = shout.options(queue=q, priority=7).enqueue("later")
    assert job.priority == 7 and job.func == "tests.registered_jobs:shout"
    assert job.max_retries == 0 and job.timeout == 20          # the decorator's options
    delayed = shout.options(queue=q).enqueue_in(3600, "x")
    assert delayed.status == "scheduled"
    burst("reg")
    assert q.fetch_job(job.id).result == "LATER"
    with pytest.raises(TypeError, match="unknown job options"):
        shout.options(prio=3)
    with pytest.raises(InvalidFunction):       # a worker could not import these by name
        fusionworker.job(lambda: None)
    with pytest.raises(InvalidFunction, match="private"):
        register(_private)


def _private() -> None:
    pass


def test_an_attribute_escape_through_an_imported_module_is_refused_and_no_horse_imports_it(
        r, settings, processes, tmp_path):
    """A module the worker names (FUSIONWORKER_IMPORTS) is imported by its fork server
    before any horse, and not by the worker process (models loaded once: a short-lived
    child tells it what the module registers): an escape through it is refused by the
    horse's walk over the server's copy, and no horse imports the module."""
    markers = tmp_path / "imports"
    markers.mkdir()
    q = Queue("walk", r, settings=settings, events=False)
    r.sadd(q.keys.queues, "walk")

    def write(job_id, func):
        r.hset(q.qkeys.job(job_id), mapping={
            "id": job_id, "queue": "walk", "func": func, "args": "[]", "kwargs": "{}",
            "timeout": "5", "status": "queued"})
        r.zadd(q.qkeys.pending, {job_id: 2**42})

    env = {"FUSIONWORKER_ALLOWED_MODULES": "tests.marker_jobs",
           "FUSIONWORKER_IMPORTS": "tests.marker_jobs", "FW_TEST_IMPORT_MARKERS": str(markers)}
    write("e1", "tests.marker_jobs:os.system")
    write("e2", "tests.marker_jobs:pathlib.Path")
    write("e3", "tests.marker_jobs:job")            # fusionworker's decorator, imported there
    first = processes.worker("--customq", "walk", "--burst", env=env)
    assert first.wait(60) == 0, processes.output(first)
    for job_id in ("e1", "e2", "e3"):
        assert q.fetch_job(job_id).failure_reason == "refused"
    # the child that told the worker what it registers, and the fork server before any
    # horse (an --import module is named by the operator: loaded once for every horse,
    # issue 34); not the worker process, and no horse
    names = sorted(p.name for p in markers.iterdir())
    assert str(first.pid) not in names and len(names) == 2, names
    # the control: the markers do see the worker's other processes
    write("fine", "tests.marker_jobs:ok")
    second = processes.worker("--customq", "walk", "--burst", env=env)
    assert second.wait(60) == 0, processes.output(second)
    assert q.fetch_job("fine").result == "ok", q.fetch_job("fine").to_dict()
    pids = {p.name for p in markers.iterdir()} - {str(first.pid), str(second.pid)}
    assert pids, "no other process imported the module"


def test_a_producer_without_the_job_code_checks_names_and_searches_for_it_once(
        r, settings, monkeypatch):
    """A producer that cannot import an allowed module (the job code is deployed on
    the workers only) checks each job's name and enqueues it; the module is not
    searched for again at every enqueue (each search stats every ``sys.path`` entry:
    it cost such a producer a third of its CPU per enqueue)."""
    import importlib.abc

    looked: list[str] = []

    class Counting(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "workers_only_jobs":
                looked.append(name)
            return None

    monkeypatch.setattr(sys, "meta_path", [Counting(), *sys.meta_path])
    q = Queue("byname", r, settings=settings.replace(allowed_modules=("workers_only_jobs",)),
              events=False)
    jobs = [q.enqueue("workers_only_jobs.sms:send", n) for n in range(3)]
    assert [j.get_status() for j in jobs] == ["queued"] * 3
    assert looked == ["workers_only_jobs"]
    with pytest.raises(FunctionNotAllowed):      # the name is still checked
        q.enqueue("elsewhere.sms:send", 1)
    with pytest.raises(InvalidFunction):
        q.enqueue("workers_only_jobs.sms:_private", 1)
