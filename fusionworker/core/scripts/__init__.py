"""Loads the Lua scripts: each ``<name>.lua`` joined with ``_lib.lua``.

The script's text is the body of a function that starts on the chunk's first
line, so a Lua error (``user_script:N``) names the script's own line N; the
helpers of ``_lib.lua`` follow it, declared local on that first line::

    local now, hget, ... local function main() <name>.lua ... end
    <_lib.lua> return main()

An error on a line past the script's end is in a helper: :meth:`_Script.__call__`
names it ``_lib.lua:L`` in the error it raises.

No script spells a job field, a key, a status or a failure reason by hand:
``F.<name>`` is the hash field of record field ``<name>`` (``record.SCRIPT_FIELDS``),
``K.<name>`` the key of ``QueueKeys.<name>`` after the queue's base
(``keys.script_suffixes``), ``S.<name>`` a :class:`JobStatus` and ``R.<name>`` a
:class:`FailureReason` (``S.queued`` is ``'queued'``); ``B.<name>`` a field of a
batch's hash or a kind of its callbacks (``record.BATCH_FIELDS``, ``BATCH_CALLBACKS``)
and ``C.<name>`` a field of a cron entry's (``record.CRON_FIELDS``). Each is replaced by its Lua
string when the source is built, once per process (so a script's SHA is fixed):
``base .. K.job .. jid`` becomes ``base .. 'job:' .. jid``. An unknown name fails
there (:class:`UnknownName`), before any script is sent.

Every multi-key state change is one script, registered once per client and
called by SHA (redis-py's ``Script`` falls back to ``EVAL`` after a
``NOSCRIPT``, e.g. after a Redis restart or a failover).

On a Redis Cluster a script can still be queued on a pipeline (the worker
records an outcome and claims its next job in one round trip): redis-py refuses
``EVALSHA`` on a ``ClusterPipeline``, so there it is sent as ``EVAL`` with
the script's text (the server caches it by SHA; routed by the one key, the
queue's hash-tagged base).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from redis.client import Pipeline
from redis.cluster import ClusterPipeline
from redis.exceptions import NoScriptError, ResponseError

from ..keys import script_suffixes
from ..record import BATCH_CALLBACKS, BATCH_FIELDS, CRON_FIELDS, SCRIPT_FIELDS
from ..vocabulary import FailureReason, JobStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..redis_client import RedisClient

NAMES = (
    "enqueue", "claim", "finish", "touch_many", "requeue", "cancel", "delete",
    "reprioritize", "cron_tick", "enqueue_many", "dep_register", "dep_done", "batch_done",
    "progress", "waiting", "minutes", "hold", "release", "use", "history", "stop",
    "run_now", "save_meta", "alone", "ask_shutdown",
)


#: a name ``_lib.lua`` defines at its top level (``function f(`` or ``NAME =``)
_LIB_NAME = re.compile(r"^(?:function ([A-Za-z_]\w*)\s*\(|([A-Za-z_]\w*)\s*=)", re.M)
#: a Lua name (or a word of a comment: counting one too many only keeps a helper)
_WORD = re.compile(r"[A-Za-z_]\w*")
#: where Redis says a script failed: ``user_script:N`` (compile and run-time errors)
_WHERE = re.compile(r"user_script:(\d+)")


#: ``F.<field>`` / ``K.<key>`` / ``S.<status>`` / ``R.<reason>`` / ``B.<batch field>`` /
#: ``C.<cron entry field>`` in a script (see the module docstring), one pattern each (a literal start is found fast: every script
#: expanded in 0.38 ms, against 0.52 ms with one ``[FKSR]`` pattern); one preceded by a
#: name's character or a dot (``xF.a``, ``t.F.a``) is left as it is: :func:`expand` looks
_NAMES = {space: re.compile(space + r"\.[A-Za-z_]\w*") for space in "FKSRBC"}
_WHAT = {"F": "job record field (record.py)", "K": "queue key (keys.py)",
         "S": "job status (vocabulary.py)", "R": "failure reason (vocabulary.py)",
         "B": "batch field (record.py)", "C": "cron entry field (record.py)"}


class UnknownName(ValueError):
    """A script names a field, key, status or reason (``F.x``, ``K.x``, ``S.x``, ``R.x``,
    ``B.x``, ``C.x``) that the schema or the vocabulary does not have."""


@functools.cache
def _names() -> dict[str, str]:
    """``'F.worker_name'`` -> ``"'worker'"``: each name a script may use, as Lua."""
    spaces = {"F": SCRIPT_FIELDS, "K": script_suffixes(),
              "S": {m.name.lower(): m.value for m in JobStatus},
              "R": {m.name.lower(): m.value for m in FailureReason},
              "B": {n: n for n in (*BATCH_FIELDS, *BATCH_CALLBACKS)},
              "C": {n: n for n in CRON_FIELDS}}
    return {f"{space}.{name}": f"'{value}'"
            for space, names in spaces.items() for name, value in names.items()}


def expand(text: str, file: str) -> str:
    """``text`` of script ``file`` with each ``F.<name>``, ``K.<name>``, ``S.<name>``,
    ``R.<name>``, ``B.<name>`` and ``C.<name>`` replaced by its Lua string; :class:`UnknownName` for a name the
    schema or the vocabulary does not have."""
    names = _names()

    def literal(match: re.Match[str]) -> str:
        at = match.start()
        if at and (text[at - 1].isalnum() or text[at - 1] in "_."):
            return match.group()
        found = names.get(match.group())
        if found is None:
            line = text.count("\n", 0, at) + 1
            raise UnknownName(f"{file}:{line}: {match.group()} names no {_WHAT[text[at]]}")
        return found

    for pattern in _NAMES.values():
        text = pattern.sub(literal, text)   # ``literal`` reads the text of this pass
    return text


@functools.cache
def _read(name: str) -> str:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return expand(text, name)


@functools.cache
def _lib() -> tuple[str, str]:
    """``_lib.lua``'s names, declared local (``local now, hget, ...``), and its text."""
    lib = _read("_lib.lua")
    return "local " + ", ".join(a or b for a, b in _LIB_NAME.findall(lib)), lib


@functools.cache
def _lib_parts() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """``_lib.lua`` cut at each top-level definition: ``(name, text, names its text
    uses)``, in order; the text before the first definition has the name ``""``.
    A part runs from its definition's line to the next line that starts a new
    statement at the left margin (a function's closing ``end`` stays in it)."""
    parts: list[tuple[str, list[str]]] = [("", [])]
    for line in _lib()[1].splitlines(keepends=True):
        head = _LIB_NAME.match(line)
        if head:
            parts.append((head.group(1) or head.group(2), [line]))
        elif line[:1] not in ("", " ", "\t", "\n") and not line.startswith("end"):
            parts.append(("", [line]))   # a comment or statement at the margin ends a part
        else:
            parts[-1][1].append(line)
    return tuple((name, "".join(lines), frozenset(_WORD.findall("".join(lines))))
                 for name, lines in parts)


def _used(script: str) -> frozenset[str]:
    """The library's names ``script`` calls or reads, and those they use, transitively."""
    parts = {name: words for name, _, words in _lib_parts() if name}
    todo = [w for w in set(_WORD.findall(script)) if w in parts]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(w for w in parts[name] if w in parts and w not in seen)
    return frozenset(seen)


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (library included); its line N is the chunk's.

    The library's definitions the script never uses, directly or through another,
    are left out (each kept as as many empty lines, so a helper's line numbers hold):
    Redis runs the whole chunk on every call, and each definition is a closure made
    and later collected again: without the unused ones an enqueue cost the server
    3 % fewer instructions, a claimed and finished job 2 % fewer
    (``bench/redis_instructions.py``)."""
    local, _ = _lib()
    script = _read(f"{name}.lua")
    if not script.endswith("\n"):
        script += "\n"
    used = _used(script)
    lib = "".join(text if not part or part in used else "\n" * text.count("\n")
                  for part, text, _ in _lib_parts())
    return f"{local} local function main() {script}end\n{lib}\nreturn main()\n"


@functools.cache
def script_lines(name: str) -> int:
    """How many lines ``<name>.lua`` has: a chunk line past it is a helper's."""
    return _read(f"{name}.lua").rstrip("\n").count("\n") + 1


def explain(name: str, text: str) -> str:
    """``text`` of a Redis error of script ``name``, its places named: ``user_script:N``
    becomes ``<name>.lua:N`` or, past the script, ``_lib.lua:L``."""
    last = script_lines(name)

    def where(match: re.Match[str]) -> str:
        line = int(match.group(1))
        if line <= last:
            return f"{name}.lua:{line}"
        return f"_lib.lua:{line - last - 1}"

    return _WHERE.sub(where, text)


class _Script:
    """A registered redis-py ``Script`` that a Redis Cluster pipeline accepts too."""

    def __init__(self, script: Any, name: str = "") -> None:
        self.script = script
        self.name = name

    def __call__(self, keys: list[Any], args: list[Any], client: RedisClient | None = None) -> Any:
        if isinstance(client, ClusterPipeline):
            return client.execute_command("EVAL", self.script.script, len(keys), *keys, *args)
        target = self.script.registered_client if client is None else client
        try:
            if isinstance(target, Pipeline):    # redis-py's Script has it load the script
                return self.script(keys=keys, args=args, client=client)
            try:    # by SHA, as redis-py's Script does, without its copies of the arguments
                return target.evalsha(self.script.sha, len(keys), *keys, *args)
            except NoScriptError:     # Redis restarted or failed over: Script loads it
                return self.script(keys=keys, args=args, client=client)
        except ResponseError as exc:
            text = str(exc)
            named = explain(self.name, text) if self.name else text
            if named == text:
                raise
            raise type(exc)(named) from exc

    def queue_by_sha(self, pipe: Any, keys: list[Any], args: list[Any]) -> None:
        """Queue on ``pipe`` by SHA alone, without the ``SCRIPT EXISTS`` round trip that
        redis-py adds to every ``execute()`` of a pipeline holding a ``Script``.

        The caller must handle a ``NoScriptError`` reply (after a Redis restart or a
        failover), e.g. by calling the script once directly, which loads it.
        A Cluster pipeline gets ``EVAL`` with the source, as ``__call__`` does.
        """
        if isinstance(pipe, ClusterPipeline):
            pipe.execute_command("EVAL", self.script.script, len(keys), *keys, *args)
        else:
            pipe.evalsha(self.script.sha, len(keys), *keys, *args)


class Scripts:
    """The scripts registered on one client: ``Scripts(r).claim(keys=[...], args=[...])``."""

    def __init__(self, connection: RedisClient, extra: tuple[str, ...] = ()) -> None:
        self._scripts = {
            name: _Script(connection.register_script(source(name)), name)
            for name in NAMES + extra
        }

    def reload_missing(
        self, answers: list[Any], calls: Sequence[tuple[str, list[Any], list[Any]] | None],
        catch: type[Exception] | tuple[type[Exception], ...] = ResponseError,
    ) -> int:
        """After a pipeline of scripts queued by SHA (:meth:`_Script.queue_by_sha`):
        each ``NOSCRIPT`` answer (Redis restarted or failed over) is replaced, in
        place, by the reply of the same call made directly (the ``Script`` call
        loads the script), or by the exception it raised when that is a ``catch``.

        ``calls[i]`` is ``(script name, keys, args)`` of ``answers[i]``, or None
        for an answer that is no script's. Returns how many calls were made again.
        """
        again = 0
        for i, call in enumerate(calls):
            if call is None or not isinstance(answers[i], NoScriptError):
                continue
            name, keys, args = call
            again += 1
            try:
                answers[i] = self._scripts[name](keys=keys, args=args)
            except catch as exc:
                answers[i] = exc
        return again

    def touch(self, keys: list[Any], args: list[Any], client: RedisClient | None = None) -> Any:
        """Renew one started job's lease: ``args = [job_id, token, lease_seconds]``; 1, or
        0 when that attempt no longer owns the job (``touch_many.lua`` for one job)."""
        job_id, token, lease = args
        return self._scripts["touch_many"](keys=keys, args=[lease, job_id, token],
                                           client=client)[0]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_scripts"][name]
        except KeyError:
            raise AttributeError(name) from None


#: guards the first registration of a client's scripts (:func:`scripts_for`)
_scripts_lock = threading.Lock()


def scripts_for(connection: RedisClient) -> Scripts:
    """The registered scripts of a client (registered once per client).

    Kept on the client itself (``_fusionworker_scripts``): the scripts refer
    to the client, so a cache elsewhere would keep every client (and its
    sockets) alive; this way they go together.
    """
    found: Scripts | None = getattr(connection, "_fusionworker_scripts", None)
    if found is None:
        with _scripts_lock:
            found = getattr(connection, "_fusionworker_scripts", None)
            if found is None:
                found = Scripts(connection)
                setattr(connection, "_fusionworker_scripts", found)  # noqa: B010 - not its own
    return found
