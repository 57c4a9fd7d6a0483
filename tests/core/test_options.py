"""The one list of enqueue options (core/options.py) and the places that read it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import redis

from fusionworker.cli.jobs import FILE_OPTIONS
from fusionworker.core import options
from fusionworker.core.queue import Queue, scripts_for
from fusionworker.core.registry import JobFunction
from tests import jobs
from tests.redis_servers import redis_single  # noqa: F401 - fixture

CORE = Path(__file__).resolve().parents[2] / "fusionworker" / "core"


@pytest.mark.parametrize("method", [Queue.enqueue_call, Queue.prepare_call])
def test_the_keyword_options_of_the_queue_are_the_one_list(method):
    params = inspect.signature(method).parameters
    keywords = [n for n, p in params.items()
                if p.kind is p.KEYWORD_ONLY and not n.startswith("_")]
    assert tuple(keywords) == options.NAMES


def test_the_options_signature_is_written_once():
    """enqueue_call takes prepare_call's signature (options.takes_options_of) instead
    of spelling the options again."""
    tree = ast.parse((CORE / "queue.py").read_text(encoding="utf-8"))
    spelled = [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and any(a.arg in options.OPTIONS for a in f.args.kwonlyargs)]
    assert spelled == ["prepare_call"]
    enqueue, prepare = inspect.signature(Queue.enqueue_call), inspect.signature(Queue.prepare_call)
    assert enqueue.parameters == prepare.parameters
    assert (enqueue.return_annotation, prepare.return_annotation) == ("Job[Any]", "PreparedJob")


def test_a_handle_and_a_file_line_take_every_option_and_nothing_else():
    handle = JobFunction(jobs.add, **{name: None for name in options.NAMES})
    assert set(handle.default_options) == options.OPTIONS
    with pytest.raises(TypeError, match="unknown job options: jobtimeout"):
        JobFunction(jobs.add, jobtimeout=3)
    # RQ's and Celery's names are taken as in Queue.enqueue (options.ALIASES)
    assert JobFunction(jobs.add, job_timeout=3).default_options == {"timeout": 3}
    assert set(FILE_OPTIONS) == options.OPTIONS | {"in"}


def test_enqueue_takes_the_options_out_and_leaves_the_job_arguments(queue):
    q = queue()
    job = q.enqueue(jobs.echo, 1, body="hi", priority=5, unique_key="k1", group="g")
    assert job.kwargs == {"body": "hi"} and job.args == [1]
    assert (job.priority, job.unique_key, job.group) == (5, "k1", "g")
    stored = q.fetch_job(job.id)
    assert stored is not None and (stored.priority, stored.group) == (5, "g")


def test_options_are_validated_before_anything_is_written(queue, r):
    q = queue()
    for bad, match in ((dict(timeout=float("nan")), "timeout"),
                       (dict(max_retries=-1), "max_retries"),
                       (dict(retry_delay=-2), "retry_delay"),
                       (dict(batch="b1"), "batch must be a Batch")):
        with pytest.raises((ValueError, TypeError), match=match):
            q.enqueue(jobs.add, 1, 2, **bad)
    assert q.count == 0 and not r.keys(q.qkeys.match_all)


def test_no_key_name_is_built_outside_keys_py():
    """Keys are spelled in keys.py only: no ``... .base + "..."`` anywhere else in the
    package (core, runtime, events, web, ...)."""
    found = []
    package = CORE.parent
    for path in sorted(package.rglob("*.py")):
        if path == CORE / "keys.py":
            continue
        name = path.relative_to(package).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                    and not isinstance(node.left, ast.List)):
                text = ast.unparse(node)
                if ".base" in text or "outbox" in text or "rate" in text:
                    found.append(f"{name}:{node.lineno}: {text}")
            if isinstance(node, ast.JoinedStr) and ".base" in ast.unparse(node):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_a_script_called_by_sha_after_a_script_flush_is_loaded_and_run(redis_single,  # noqa: F811
                                                                      settings):
    """A script is called by its SHA (EVALSHA, no copy of its arguments): after Redis
    lost its scripts (a restart, a failover) the call loads the script and runs it once."""
    client = redis.Redis(port=redis_single, decode_responses=True)
    q = Queue("default", client, settings=settings, events=False)
    first = q.enqueue(jobs.add, 1, 2)
    client.script_flush()
    second = q.enqueue(jobs.add, 3, 4)
    assert q.get_job_ids() == [first.id, second.id]
    assert client.script_exists(scripts_for(client).enqueue.script.sha) == [True]


def test_a_noscript_answer_is_made_again_directly(redis_single, settings):  # noqa: F811
    client = redis.Redis(port=redis_single, decode_responses=True)
    q = Queue("default", client, settings=settings, events=False)
    job = q.enqueue(jobs.add, 1, 2)
    scripts = scripts_for(q.connection)
    client.script_flush()      # a private server: as after its restart, no script is known
    pipe = q.connection.pipeline(transaction=False)
    call = ("reprioritize", [q.qkeys.base], [job.id, 7])
    scripts.reprioritize.queue_by_sha(pipe, call[1], call[2])
    pipe.exists(q.qkeys.pending)
    answers = pipe.execute(raise_on_error=False)
    assert isinstance(answers[0], redis.exceptions.NoScriptError)
    assert scripts.reload_missing(answers, [call, None]) == 1
    assert not isinstance(answers[0], Exception) and answers[1] == 1
    stored = q.fetch_job(job.id)
    assert stored is not None and stored.priority == 7


def test_no_option_given_checks_to_what_the_general_path_gives():
    """A plain job (no option given) takes a short path in ``checked``: the same
    options as the general path's for the same defaults, a new job id each."""
    plain = options.JobOptions().checked(42.0, 3)
    general = options.JobOptions(priority=0).checked(42.0, 3)    # one given: every check
    assert plain._replace(job_id="x") == general._replace(job_id="x")
    assert len(plain.job_id) == 32 and plain.job_id != general.job_id
    assert options.JobOptions().checked(42.0, 3).job_id != plain.job_id
