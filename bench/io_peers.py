"""Peer apps of ``bench/io_bound.py``: Celery, Dramatiq and arq, on ``BENCH_REDIS_URL``.

Each is imported only by its own worker (``celery -A bench.io_peers:celery_app``,
``dramatiq bench.io_peers:dramatiq_broker``, ``arq bench.io_peers.ArqSettings``) and
by the bench to enqueue.
"""

from __future__ import annotations

import os
import sys

from bench.io_jobs import io_sleep, io_sleep_async

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
QUEUE = "ioq"
WANT = os.environ.get("BENCH_PEER", "")

celery_app = None
dramatiq_broker = None
celery_io_sleep = dramatiq_io_sleep = None

if WANT == "celery":
    from celery import Celery

    celery_app = Celery("bench_io", broker=URL)
    celery_app.conf.update(task_ignore_result=True, task_default_queue=QUEUE,
                           worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)
    celery_io_sleep = celery_app.task(name="bench.io_sleep")(io_sleep)

if WANT == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    # a namespace of its own when the bench gives one (bench/cpu_per_job.py: db 0 is shared)
    dramatiq_broker = RedisBroker(url=URL, namespace=os.environ.get("BENCH_DRAMATIQ_NAMESPACE",
                                                                    "dramatiq"))
    dramatiq.set_broker(dramatiq_broker)
    dramatiq_io_sleep = dramatiq.actor(io_sleep, queue_name=QUEUE, actor_name="io_sleep",
                                       max_retries=0)


class ArqSettings:
    """``arq bench.io_peers.ArqSettings`` (arq imported lazily: its own environment)."""

    functions = [io_sleep_async]
    queue_name = QUEUE
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "100"))
    if WANT == "arq":
        from arq.connections import RedisSettings

        redis_settings = RedisSettings.from_dsn(URL)


async def _arq_enqueue(path: str, n: int, seconds: float) -> None:
    import time

    from arq import create_pool
    from arq.connections import RedisSettings

    pool = await create_pool(RedisSettings.from_dsn(URL))
    for _ in range(n):
        await pool.enqueue_job("io_sleep_async", path, time.time(), seconds, _queue_name=QUEUE)
    await pool.aclose()


if __name__ == "__main__" and sys.argv[1:2] == ["arq-enqueue"]:
    import asyncio

    asyncio.run(_arq_enqueue(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
