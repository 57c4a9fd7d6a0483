"""The runtime layer: the processes. The worker loop and its slots, the horse
(fork, death penalty, exit classification), the fork server and the
supervisor of ``--processes N``. Imports core, events and middleware only
(``tests/test_layers.py``); see docs/design.md, "Layers".

| module | one concern |
|---|---|
| ``worker.py`` | :class:`Worker`: identity, registration, signals, reload, middleware |
| ``loop.py`` | the claim/dispatch loop over N slots; the crash-point table (docstring) |
| ``slot.py`` | one running horse: its job, deadlines, kill, and how it ended |
| ``recorder.py`` | the finish pipeline: outcomes, counters, and the next claim, returned |
| ``claim.py`` | the queues' order (weights, round-robin) and claim.lua's answers |
| ``state.py`` | the explicit state: :class:`WorkerState`, :class:`LoopState` |
| ``errors.py`` | how a Redis error is read: an outage or a refusal |
| ``horse.py``, ``forkserver.py`` | the forked process per job, and the lean process that forks it |
| ``progress.py``, ``progress_store.py`` | a job's progress/meta: the horse's side, the parent's |
| ``supervisor.py`` | ``--processes N``: N workers, restarted when one dies |

With ``--concurrency 1`` the loop has one slot and runs the same code as with N.
"""
