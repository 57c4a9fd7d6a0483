"""Issue 30, item 1: a record that cannot be read fails as its own job (reason
``malformed``), never the worker; enqueue refuses what could not be read back."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fusionworker.core import codec
from fusionworker.core.connection import connect
from fusionworker.core.queue import scripts_for
from fusionworker.middleware.reaper import reap_once
from fusionworker.runtime.worker import Worker


def nested(levels: int) -> Any:
    """A list ``levels`` containers deep (``nested(1) == []``)."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


#: raw records a producer of ours never writes: (field, text written over the job's own)
POISON = {
    "brackets": ("args", "[" * 100_000),
    "deep_490": ("args", "[" * 490 + "]" * 490),
    "deep_101": ("args", "[" * 101 + "]" * 101),
    "not_json": ("args", "[1, 2"),
    "args_object": ("args", '{"a": 1}'),
    "kwargs_list": ("kwargs", "[1]"),
    "bad_decimal": ("args", '[{"__fw__": "decimal", "v": "twelve"}]'),
    "datetime_number": ("args", '[{"__fw__": "datetime", "v": 5}]'),
    "unhashable_set": ("args", '[{"__fw__": "set", "v": [[1]]}]'),
    "tagged_dict_pairs": ("args", '[{"__fw__": "dict", "v": [1, 2]}]'),
    "bad_tag": ("args", '[{"__fw__": "pickle", "v": "gASVAAAA"}]'),
    "no_func": ("func", ""),
}


def poison(r: Any, prefix: str, job_id: str, field: str, text: str) -> None:
    key = f"{prefix}:{{default}}:job:{job_id}"
    if field == "func":
        r.hdel(key, "func")
    else:
        r.hset(key, field, text)


def test_enqueue_refuses_arguments_nested_deeper_than_the_limit_and_writes_nothing(
        queue, burst, r, prefix):
    q = queue()
    # args is one level: args=[nested(n)] is n + 1 deep
    with pytest.raises(codec.TooDeep, match=r"cannot enqueue tests.jobs:echo: "
                                            r"args\[0\]\[0\].*\[0\] is nested deeper than 100"):
        q.enqueue_call("tests.jobs:echo", args=[nested(codec.MAX_DEPTH)])
    with pytest.raises(codec.UnsupportedType, match="nested deeper"):
        q.enqueue_call("tests.jobs:echo", args=[nested(490)])
    with pytest.raises(codec.UnsupportedType, match="nested deeper"):
        q.enqueue_call("tests.jobs:echo", kwargs={"v": {"a": nested(200)}})
    assert r.keys(f"{prefix}:*") == []
    # the deepest value written: args=[nested(99)], 100 deep, and returned as it is
    deepest = q.enqueue_call("tests.jobs:identity", args=[nested(codec.MAX_DEPTH - 1)])
    assert burst().successful == 1
    assert q.fetch_job(deepest.id).result == nested(codec.MAX_DEPTH - 1)


def test_enqueue_refuses_arguments_larger_than_max_args_bytes_and_writes_nothing(
        queue, r, prefix, settings):
    from fusionworker.core.queue import Queue

    q = Queue("default", r, settings=settings.replace(max_args_bytes=1000))
    with pytest.raises(codec.TooLarge, match=r"1\d\d\d bytes of JSON, more than "
                                             r"max_args_bytes \(1000"):
        q.enqueue("tests.jobs:echo", "x" * 1000)
    with pytest.raises(codec.TooLarge):
        q.enqueue_many([q.prepare("tests.jobs:echo", v="y" * 600, w="z" * 600)])
    assert r.keys(f"{prefix}:*") == []
    assert q.enqueue("tests.jobs:echo", "x" * 900).status == "queued"
    # the default: 10 MiB
    assert settings.max_args_bytes == 10 * 1024 * 1024


@pytest.mark.parametrize("name", sorted(POISON))
def test_a_record_that_cannot_be_read_fails_alone_as_malformed(name, queue, burst, r, prefix):
    q = queue()
    before = q.enqueue("tests.jobs:add", 1, 2)
    bad = q.enqueue("tests.jobs:add", 3, 4)
    after = q.enqueue("tests.jobs:add", 5, 6)
    poison(r, prefix, bad.id, *POISON[name])
    w = burst()
    assert (w.successful, w.failed) == (2, 1)
    data = r.hgetall(f"{prefix}:{{default}}:job:{bad.id}")
    assert data["status"] == "failed" and data["failure_reason"] == "malformed", data
    assert data["error_type"] == "MalformedJob" and data["error_message"]
    assert r.zscore(f"{prefix}:{{default}}:failed", bad.id) is not None
    assert r.zcard(f"{prefix}:{{default}}:started") == 0
    assert q.fetch_job(before.id).result == 3 and q.fetch_job(after.id).result == 11


def test_arguments_over_the_workers_max_args_bytes_fail_as_malformed(
        queue, burst, r, prefix, settings):
    q = queue()
    big = q.enqueue("tests.jobs:echo", "x" * 5000)
    small = q.enqueue("tests.jobs:echo", "x")
    w = burst(settings=settings.replace(max_args_bytes=4000))
    assert (w.successful, w.failed) == (1, 1)
    data = r.hgetall(f"{prefix}:{{default}}:job:{big.id}")
    assert data["failure_reason"] == "malformed" and "max_args_bytes (4000)" in data[
        "error_message"]
    assert q.fetch_job(small.id).status == "finished"


@pytest.mark.parametrize("field", ["args", "kwargs", "func", "meta", "queue", "status"])
def test_bytes_that_are_not_utf8_fail_one_job_not_the_claim(field, redis_url, prefix, settings):
    """Our clients read bytes that are not UTF-8 as escapes (connect()): the record is
    malformed (or its function unknown), the claim and the other jobs go on."""
    from fusionworker.core.queue import Queue

    client = connect(redis_url)
    q = Queue("default", client, settings=settings)
    bad = q.enqueue("tests.jobs:add", 3, 4)
    good = q.enqueue("tests.jobs:add", 1, 2)
    raw = redis.Redis.from_url(redis_url)
    value = {"args": b'["\xff\xfe"]', "kwargs": b'{"\xff": 1}', "func": b"tests.jobs:\xffadd",
             "meta": b'{"a": "\xc3"}', "queue": b"def\xffault", "status": b"que\xffued"}[field]
    raw.hset(f"{prefix}:{{default}}:job:{bad.id}", field, value)
    w = Worker("default", client, settings=settings, burst=True, defaults=False, middleware=[])
    assert w.work() == 0
    assert q.fetch_job(good.id).result == 3
    job = q.fetch_job(bad.id)
    if field in ("meta", "status"):      # not part of what runs: the job runs
        assert job.status == "finished" and job.result == 7
    else:
        assert job.status == "failed", job
        assert job.failure_reason in ("malformed", "refused"), job.failure_reason
    assert client.zcard(f"{prefix}:{{default}}:started") == 0


def test_a_poison_job_whose_claimer_died_is_reaped_then_fails_alone(queue, burst, r, prefix,
                                                                     settings):
    """The crash point between the claim and the outcome (docs/design.md, "Decoding what
    Redis holds"): a worker claimed the record and died before recording anything. The
    reaper hands it back without reading its arguments; the next claimer fails it as
    malformed and runs the job beside it."""
    q = queue()
    bad = q.enqueue("tests.jobs:add", 3, 4, max_retries=3)
    poison(r, prefix, bad.id, "args", "[" * 490 + "]" * 490)
    reply = scripts_for(r).claim(keys=[q.qkeys.base], args=["ghost.1", "t0", -1.0, 3600])
    assert reply[0] == "job"          # claimed, its lease already over, its worker gone
    counts = reap_once(r, settings)
    assert counts["requeued"] == 1 and counts["jobs"] == [bad.id]
    good = q.enqueue("tests.jobs:add", 1, 2)
    w = burst()
    assert (w.successful, w.failed) == (1, 1)
    data = r.hgetall(f"{prefix}:{{default}}:job:{bad.id}")
    assert data["status"] == "failed" and data["failure_reason"] == "malformed", data
    assert q.fetch_job(good.id).result == 3 and r.zcard(q.qkeys.started) == 0
