"""Every job status in the API and the pages (deferred included), the status tab
counts, a job's dependencies and batch, labelled arguments and the trimmed
traceback; through Starlette's TestClient on the real Redis."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from fusionworker.core.batch import Batch
from fusionworker.web import create_app
from fusionworker.web.details import trim_traceback
from tests.web_support import SAME_SITE

TOKEN = "states-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(r, settings):
    with TestClient(create_app(settings.replace(web_token=TOKEN), r),
                    headers=SAME_SITE) as c:
        yield c


def test_deferred_jobs_listed_by_the_api_and_the_queue_page_with_tab_counts(client, queue):
    q = queue("default")
    first = q.enqueue("tests.jobs:add", 1, 2)
    waiting = [q.enqueue("tests.jobs:add", i, 0, depends_on=first) for i in range(3)]
    answer = client.get("/api/v1/jobs?queue=default&status=deferred", headers=BEARER)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["total"] == 3
    assert [j["id"] for j in doc["jobs"]] == [j.id for j in waiting]   # oldest first
    assert {j["status"] for j in doc["jobs"]} == {"deferred"}
    page = client.get("/queues/default?status=deferred", headers=BEARER)
    assert page.status_code == 200
    for job in waiting:
        assert f'data-job="{job.id}"' in page.text
    assert first.id not in page.text
    counts = dict(re.findall(r'data-k="(\w+)">(\d+)</span>', page.text))
    assert counts == {"queued": "1", "scheduled": "0", "deferred": "3", "held": "0", "started": "0",
                      "failed": "0", "finished": "0", "canceled": "0"}
    bad = client.get("/api/v1/jobs?queue=default&status=waiting", headers=BEARER)
    assert bad.status_code == 400 and "deferred" in bad.json()["error"]


def test_job_page_names_its_dependencies_their_status_and_its_batch(client, queue, burst):
    a, b = queue("a"), queue("b")
    done = a.enqueue("tests.jobs:add", 1, 1)
    burst("a")
    open_dep = a.enqueue("tests.jobs:add", 2, 2)
    with Batch(on_complete="tests.jobs:add", queue="b", connection=b.connection,
               settings=b.settings) as batch:
        dependent = b.enqueue_call("tests.jobs:add", [3, 3], depends_on=[done, open_dep],
                                   batch=batch)
    doc = client.get(f"/api/v1/jobs/{dependent.id}", headers=BEARER).json()
    assert doc["status"] == "deferred"
    deps = {d["id"]: d for d in doc["dependencies"]}
    assert deps[done.id]["status"] == "finished" and not deps[done.id]["waited_on"]
    assert deps[open_dep.id]["status"] == "queued" and deps[open_dep.id]["waited_on"]
    assert deps[open_dep.id]["queue"] == "a"
    assert doc["batch_status"]["id"] == batch.id and doc["batch_status"]["total"] == 1
    assert doc["batch_status"]["sealed"] is True and doc["batch_status"]["queue"] == "b"
    # the dependency's page lists the job waiting on it
    up = client.get(f"/api/v1/jobs/{open_dep.id}", headers=BEARER).json()
    assert [d["id"] for d in up["dependents"]] == [dependent.id]
    page = client.get(f"/jobs/{dependent.id}", headers=BEARER).text
    block = page.split('id="job-dependencies"', 1)[1].split("</ul>", 1)[0]
    assert f'href="/jobs/{done.id}?queue=a"' in block
    assert f'href="/jobs/{open_dep.id}?queue=a"' in block
    assert "status-finished" in block and "status-queued" in block
    assert f'href="/batches/{batch.id}?queue=b"' in page
    assert 'data-action="cancel"' in page     # a deferred job can be canceled


def test_arguments_are_labelled(client, queue):
    job = queue("default").enqueue("tests.jobs:add", 1, y=2)
    page = client.get(f"/jobs/{job.id}", headers=BEARER).text
    args = page.split('id="job-args">', 1)[1].split("</pre>", 1)[0]
    kwargs = page.split('id="job-kwargs">', 1)[1].split("</pre>", 1)[0]
    assert "Positional" in page and "Keyword" in page
    assert "1" in args and "y" not in args
    assert "&#34;y&#34;: 2" in kwargs


def test_traceback_starts_at_the_jobs_frames_with_the_full_one_a_click_away(
        client, queue, burst):
    job = queue("default").enqueue("tests.jobs:boom", "kaput")
    burst("default")
    doc = client.get(f"/api/v1/jobs/{job.id}", headers=BEARER).json()
    assert "fusionworker/runtime/horse" in doc["traceback"]
    assert "fusionworker/runtime" not in doc["traceback_short"]
    assert doc["traceback_short"].startswith("Traceback (most recent call last):\n"
                                             '  File "')
    assert "tests/jobs.py" in doc["traceback_short"].splitlines()[1]
    assert doc["traceback_short"].rstrip().endswith("ValueError: kaput")
    assert doc["traceback_hidden_frames"] >= 1
    page = client.get(f"/jobs/{job.id}", headers=BEARER).text
    short = page.split('id="traceback">', 1)[1].split("</pre>", 1)[0]
    assert "fusionworker/runtime" not in short and "kaput" in short
    full = page.split('id="traceback-full">', 1)[1].split("</details>", 1)[0]
    assert "<summary>" in full and "fusionworker/runtime/horse" in full


def test_trim_keeps_a_traceback_made_only_of_the_workers_frames_and_chained_blocks():
    own = ('Traceback (most recent call last):\n'
           '  File "/x/fusionworker/runtime/horse.py", line 3, in run\n    load()\n'
           'ImportError: nope\n')
    assert trim_traceback(own) == (own, 0)
    chained = (own + "\nDuring handling of the above exception, another exception occurred:\n\n"
               'Traceback (most recent call last):\n'
               '  File "/x/fusionworker/runtime/horse.py", line 9, in run\n    call()\n'
               '  File "/app/tasks.py", line 2, in send\n    raise KeyError(1)\n'
               "KeyError: 1\n")
    short, hidden = trim_traceback(chained)
    assert hidden == 1
    assert short.count("horse.py") == 1 and "/app/tasks.py" in short
    assert short.endswith("KeyError: 1\n")
    assert trim_traceback(None) == (None, 0)


def test_a_silent_worker_is_flagged_on_the_workers_pages(client, r, settings):
    """A worker whose last heartbeat is older than its lease (its process died: the key
    lives on for ``worker_ttl``) reads ``silent`` in the API and as a warning on the
    list and on its page, not as the ``busy`` it wrote last."""
    import time

    from fusionworker.core.keys import Keys

    keys = Keys(settings.prefix)
    r.hset(keys.worker("gone"), mapping={
        "name": "gone", "pid": "1", "host": "h", "queues": "default", "state": "busy",
        "current_job": "j1", "current_jobs": "j1", "lease": "10",
        "last_heartbeat": time.time() - 60, "birth": time.time() - 600})
    r.sadd(keys.workers, "gone")
    [w] = client.get("/api/v1/workers", headers=BEARER).json()["workers"]
    assert w["state"] == "silent"
    listing = client.get("/workers", headers=BEARER).text
    assert '<span class="badge warn">silent</span>' in listing
    page = client.get("/workers/gone", headers=BEARER).text
    assert 'class="badge warn" id="worker-state"' in page and ">silent</span>" in page
