"""The runtime layer: the processes. The worker loop and its slots, the horse,
the fork server and the supervisor of ``--processes N``. Imports core, events
and middleware only (``tests/test_layers.py``); see docs/design.md, "Layers".

| module | one concern |
|---|---|
| ``worker.py`` | :class:`Worker`, the composition root: identity, registration, signals, reload |
| ``loop.py`` | the claim/dispatch loop over N slots; the crash-point table (docstring) |
| ``claim.py`` | the queues' order (weights, round-robin) and claim.lua's answers |
| ``recorder.py`` | the finish pipeline: outcomes and the next claim, returned |
| ``counters.py`` | the worker hash's job counters, counted per outcome, written by the heartbeat |
| ``minutes.py`` | the queues' per-minute outcome counts (the chart), written by the heartbeat |
| ``heartbeat.py`` | the heartbeat hash, its counters and the lease renewals (touch_many.lua) |
| ``wakeups.py`` | the pub/sub connection: wake-ups, suspend/resume |
| ``hookcalls.py`` | running the middleware's hooks, each guarded |
| ``imports.py`` | what the ``--import`` modules register, learnt from a child (the worker never imports them) |
| ``slot.py`` | the worker's side of one running horse: its job, deadlines, kill, its end |
| ``launch.py`` | how a job gets its process: fork server, own fork, or in this process |
| ``exits.py`` | how a horse ended: its report, our kill, or its wait status |
| ``protocol.py`` | the wire: fork server requests and notices, a horse's report pipe |
| ``deadlines.py`` | a horse never outlives its lease: the deadline board and its watchdog |
| ``forkserver/`` | the lean process that forks the horses: ``client.py`` (the worker's handle), ``server.py`` |
| ``horse/`` | the process of one job: ``main.py`` (set-up, report), ``run.py`` (the job, death penalty) |
| ``state.py`` | the explicit state: :class:`WorkerState`, :class:`LoopState` |
| ``errors.py`` | how a Redis error is read: an outage or a refusal |
| ``progress.py``, ``progress_store.py`` | a job's progress/meta: the horse's side, the parent's |
| ``supervisor.py`` | ``--processes N``: N workers, restarted when one dies |

With ``--concurrency 1`` the loop has one slot and runs the same code as with N.
"""
