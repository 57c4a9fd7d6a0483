"""A small Celery app as its users write it (kept as text: this checkout has no
``celery``). ``tests/compat/test_migrated_apps.py`` applies the changes
docs/from-celery.md names and runs it on a real worker."""

TASKS = '''\
import os

from celery import Celery

app = Celery("tasks", broker=REDIS_URL, backend=REDIS_URL)


@app.task(autoretry_for=(KeyError,), max_retries=2, default_retry_delay=0, acks_late=True,
          time_limit=30)
def lookup(marker):
    """A KeyError on its first run, retried as autoretry_for says."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise KeyError("not there yet")
    return "found"


@app.task(ignore_result=True)
def fire_and_forget(x):
    return x


@app.task
def add(x, y):
    return x + y
'''

PRODUCER = '''\
from tasks import add, fire_and_forget, lookup

total = add.delay(2, 3).get(timeout=30)
found = lookup.delay(MARKER).get(timeout=30)
forgotten = fire_and_forget.delay(7)
'''

#: (Celery's text, fusionworker's) as docs/from-celery.md names them
CHANGES = [
    ("from celery import Celery", "from fusionworker import job"),
    ('app = Celery("tasks", broker=REDIS_URL, backend=REDIS_URL)', ""),
    ("@app.task", "@job"),
    (".get(timeout=30)", ".wait(timeout=30).result"),
]
