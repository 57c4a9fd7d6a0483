"""The horse: the process that runs one job (a fresh fork per job).

| module | one concern |
|---|---|
| ``main.py`` | the process: its set-up, the waiting horse of the fork server, its report |
| ``run.py`` | running the job under the death penalty, into a ``HorseReport`` |

Its parent's side (deadlines, kills, how it ended) is ``runtime/slot.py`` and
``runtime/exits.py``; its lease watchdog ``runtime/deadlines.py``.
"""
