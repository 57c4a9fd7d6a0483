"""The horse: the process that runs one job (a fresh fork per job).

| module | one concern |
|---|---|
| ``main.py`` | the process: its set-up, the waiting horse of the fork server, its report |
| ``hygiene.py`` | what it holds: only its own descriptors; the OOM killer's first pick |
| ``lease.py`` | its own lease: the board read-only, a thread that ends it at its deadline |
| ``guard.py`` | a warm horse's check that a job left the framework's functions alone |
| ``warm.py`` | a warm horse: up to N jobs one after another (``--horse-jobs``) |
| ``asyncloop.py`` | an async horse: up to K ``async def`` jobs at once (``--async-per-horse``) |
| ``stay.py`` | whether a warm horse stays: its memory, a job's children |
| ``run.py`` | running the job under the death penalty, into a ``HorseReport`` |

Its parent's side (deadlines, kills, how it ended) is ``runtime/slot.py`` and
``runtime/exits.py``; its lease watchdog ``runtime/deadlines.py``.
"""
