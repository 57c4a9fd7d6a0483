"""Job functions of the ported RQ cases (imported by horses as ``tests.compat.rq_jobs``)."""

from __future__ import annotations

from fusionworker import current_job, job


def say_hello(name: str = "Stranger") -> str:
    return f"Hi there, {name}!"


def access_self() -> str:
    job = current_job()
    assert job is not None
    return job.id


def access_self_as_rq_does() -> str:
    """RQ's spelling, with the import changed from ``rq`` to ``fusionworker``."""
    from fusionworker import get_current_job

    job = get_current_job()
    assert job is not None
    return job.get_id()


class WithStatic:
    @staticmethod
    def static_method(x: int = 1) -> int:
        return x * 2


def modify_self(meta: dict[str, object]) -> None:
    job = current_job()
    assert job is not None
    job.meta.update(meta)


def modify_self_and_error(meta: dict[str, object]) -> None:
    modify_self(meta)
    raise ValueError("after the meta changed")


@job("rq_decorated", max_retries=2)
def decorated_add(x: int, y: int) -> int:
    return x + y


@job(queue="rq_decorated")
def decorated_hello() -> str:
    return "Hi"


def decorated_by_a_test(name: str) -> str:
    """Left plain: a test decorates it with a Queue of its own."""
    return name


@job(queue="rq_decorated", retry_on=(KeyError,), max_retries=1, retry_delay=0)
def decorated_key_error() -> None:
    """Retries a KeyError (its own retry_on), which the worker's list does not name."""
    raise KeyError("missing")


@job(queue="rq_decorated", autoretry_for=(KeyError,), max_retries=1, retry_delay=0)
def celery_autoretry() -> None:
    """Celery's spelling of the same."""
    raise KeyError("missing")


def fetch_result(job_id: str) -> object:
    """A callback as RQ users write it: it finds its job with Job.fetch, no settings given."""
    from fusionworker import Job

    return Job.fetch(job_id).result


def chord_total(batch_id: str) -> dict[str, object]:
    """Celery's chord callback: it reads its group's job ids and results from the batch."""
    from fusionworker import Batch

    return {"ids": Batch.job_ids(batch_id), "results": Batch.results(batch_id)}


def nightly_report() -> str:
    """Left plain: a test declares its schedule with ``fusionworker.periodic``."""
    return "report"
