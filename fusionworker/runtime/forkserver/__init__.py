"""The fork server: a lean child of the worker that forks the horses.

Why: ``fork()`` + ``_exit`` + ``waitpid`` costs in proportion to the memory
(page tables) of the process that forks. The worker parent holds redis-py,
click, psutil, the middleware: ~45 MiB, ~2.5 ms a fork on a small VM. The fork
server is a fresh interpreter that imported only what a horse needs
(``fusionworker.runtime.horse`` and its few stdlib modules, ~16 MiB), so
forking a horse from it costs a fraction of that. Each job still gets a fresh
process (isolation is unchanged): a job's changes to module state die with its
horse; unless the worker runs warm horses (``--horse-jobs N``, horse/warm.py),
which run up to N jobs each, one after another. Once a horse ran a function of an allowed module (registered or
allow-listed, see ``core/functions.py``) successfully, the server imports that
module too (warm horses: at the first request whose function passes the allow
check by name, before its horse, ``modules.py``), so later horses find it
imported, and resolves each function of it
that runs (every check of ``functions.resolve``), so later horses find it
resolved (resolved again after each later preload, whose import may rebind it).

| module | process | one concern |
|---|---|---|
| ``client.py`` | the worker | :class:`ForkServer`, the worker's handle: start, requests, notices |
| ``server.py`` | the fork server | its turn: requests, ready horses, reports, reaping |
| ``modules.py`` | the fork server | job code it imports and resolves for its horses |
| ``handover.py`` | the fork server | warm horses handed to the worker (the direct path), its sends |

The wire (requests and notices) is ``runtime/protocol.py``.

Processes and what happens when one dies::

    worker (parent) --socketpair--> fork server --fork--> horse (own process group)

    * worker dies  -> PR_SET_PDEATHSIG kills the server, which kills the horse
                      (the horse's PDEATHSIG names the server): no orphan job.
    * server dies  -> the worker reads EOF: the running jobs fail as killed
                      (``fork server died``), their horses' groups are killed,
                      and a new server is started for the next job.
    * horse dies   -> the server reaps it and sends its wait status and
                      whatever report it wrote; the worker decides as before.
                      A warm horse handed to the worker (design.md, "The
                      direct path"): the worker reads its report pipe, the
                      server reaps it and sends its wait status (GoneNotice).
    * timeouts and kills: the worker signals the horse's process group itself
      (same user), exactly as with a horse of its own.

Horses are forked ahead: the server always holds a ready horse (as many as
the largest batch of requests one turn brought, at most ``READY_MAX``: a
worker with many slots sends its claims at once), forked while the worker
records the previous jobs (or idles), each blocked on a pipe until its one
job arrives (EOF instead: it exits). It is still a fresh process per job,
forked from the same lean server; it takes its own process group, PDEATHSIG
and signal set-up only once its job came, so an idle one is not a horse yet.
A ready horse forked before a module preload is retired.

For each horse, once it reported and closed its pipe (status 0: its exit, the
unmapping of its memory, overlaps the worker's recording; the server reaps it
later) or, without a report, once it exited, the server sends its exit notice.
The server ignores SIGINT/SIGTERM (shutdown is the worker's business) and
exits when the worker closes the socket, after reaping the horses that
reported (``LAST_REAPS``).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``ForkServer`` and ``ForkServerDied`` on first use: the server process imports
    this package without the worker's handle (PEP 562)."""
    if name in ("ForkServer", "ForkServerDied"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
