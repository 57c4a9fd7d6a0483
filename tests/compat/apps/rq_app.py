"""A small RQ app as its users write it (kept as text: this checkout has no ``rq``).
``tests/compat/test_migrated_apps.py`` applies the changes docs/from-rq.md names and
runs it on a real worker."""

TASKS = '''\
import os
import time


def count_words(text):
    return len(text.split())


def flaky(marker):
    """Fails on its first run (a ValueError, as a bug would), works on the next."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("first run fails")
    return "second run works"


def slow(seconds):
    time.sleep(seconds)
    return "never stopped"
'''

PRODUCER = '''\
from datetime import timedelta

from redis import Redis
from rq import Queue, Retry
from rq.command import send_stop_job_command
from rq.job import Job

from tasks import count_words, flaky, slow

redis = Redis.from_url(REDIS_URL)
q = Queue("default", connection=redis, default_timeout="5m")
words = q.enqueue(count_words, "to be or not to be", job_timeout="30s", result_ttl="1h")
retried = q.enqueue(flaky, MARKER, retry=Retry(max=2))
later = q.enqueue_in(timedelta(seconds=0), count_words, args=["one two"])
running = q.enqueue(slow, 600, on_stopped="tasks:count_words")
'''

#: (RQ's line, fusionworker's) as docs/from-rq.md names them: imports only
CHANGES = [
    ("from rq import Queue, Retry", "from fusionworker import Queue, Retry"),
    ("from rq.command import send_stop_job_command",
     "from fusionworker.command import send_stop_job_command"),
    ("from rq.job import Job", "from fusionworker import Job"),
]
