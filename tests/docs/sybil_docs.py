"""Every code block of README.md and docs/*.md runs as a test (Sybil, loaded by the
repository's top conftest.py).

What runs how:

* ```` ```python ```` blocks run in one namespace per document, in order
  (Sybil's Python evaluator); ``>>>`` blocks are doctests (their output is
  checked). A block whose first line is ``# examples/<file>.py`` (an excerpt
  of the example app) is checked to be a part of that file, not run.
* ```` ```bash ```` / ```` ```sh ```` blocks run in ``bash -eu`` in the
  ``examples/`` folder (the example app, ``app/tasks.py``), with
  ``fusionworker`` and ``python`` meaning this checkout's; what they leave
  running (``worker … &``) is stopped at the end of the block. A block that
  would change this machine (``sudo``, ``pip install``, ``systemctl enable``…:
  :data:`MACHINE_CHANGES`) is not run but fails until it is skipped explicitly.
* ```` ```console ```` blocks: each ``$ command`` line runs as above and its
  output must match the lines shown under it (:func:`same_output`: times,
  ages, ids, host names and process ids may differ; ``…`` stands for any text).
* Anything else (plain ```` ``` ```` blocks, ``json``) is shown, not run.

Each document gets a fresh key prefix on the test Redis (``FUSIONWORKER_PREFIX``
in this process's environment, for ``Queue()`` and the commands), the example app
on ``sys.path``, and ``docs`` in its namespace: a :class:`DocEnv` that starts
real worker processes (``docs.worker("sms")``). Everything is cleaned when the
document ends. ``<!-- skip: next "why" -->`` skips the next block (Sybil's skip
directive); ``<!-- invisible-code-block: python -->`` runs set-up a reader does
not need to see.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.integration.pytest import SybilItem
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

from fusionworker.core import catalog
from tests.waiting import settle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
REDIS_URL = os.environ.get("FUSIONWORKER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: environment variables a document may change; restored when it ends
SAVED_ENV = ("FUSIONWORKER_PREFIX", "REDIS_URL", "FUSIONWORKER_ALLOWED_MODULES",
             "FUSIONWORKER_IMPORTS")
BLOCK_TIMEOUT = 60.0


class DocEnv:
    """What one document's blocks run against (see the module docstring)."""

    def __init__(self) -> None:
        self.prefix = f"doc{uuid.uuid4().hex[:10]}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.bin = tempfile.mkdtemp(prefix="fw-docs-bin-")
        # ``python`` runs this interpreter by its own path: a symlink elsewhere to a
        # virtualenv's python would start the base interpreter, without the venv's
        # packages (the venv is found next to the path a python is started by)
        for name in ("python", "python3"):
            wrapper = os.path.join(self.bin, name)
            with open(wrapper, "w", encoding="utf-8") as fh:
                fh.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
            os.chmod(wrapper, 0o755)
        # the console script as pip writes it (sys.path[0] is its folder, not the
        # current one), running this checkout's code (PYTHONPATH)
        script = os.path.join(self.bin, "fusionworker")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(f"#!{sys.executable}\nimport sys\nfrom fusionworker.cli import run\n"
                     "sys.exit(run())\n")
        os.chmod(script, 0o755)
        self.saved = {name: os.environ.get(name) for name in SAVED_ENV}
        self.prefixes = [self.prefix]
        os.environ.update(FUSIONWORKER_PREFIX=self.prefix, REDIS_URL=REDIS_URL)

    def new_prefix(self) -> str:
        """Go on under a fresh key prefix (an empty deployment for what follows)."""
        self.prefix = f"doc{uuid.uuid4().hex[:10]}"
        self.prefixes.append(self.prefix)
        os.environ["FUSIONWORKER_PREFIX"] = self.prefix
        return self.prefix

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the commands: this process's (the document's prefix) plus
        this checkout first on the paths."""
        env = dict(os.environ)
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", ""))
                                            if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def worker(self, *args: str, imports: str = "app.tasks", **extra: str
               ) -> subprocess.Popen[bytes]:
        """A real worker process (``fusionworker worker ARGS --import app.tasks``) in the
        example app's folder, stopped when the document ends."""
        cmd = [sys.executable, "-m", "fusionworker", "worker", *args]
        if imports:
            cmd += ["--import", imports]
        proc = subprocess.Popen(cmd, cwd=str(EXAMPLES), env=self.env(**extra),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def wait_for_workers(self, count: int, timeout: float = 30.0) -> None:
        """Until ``count`` workers of this document's prefix are registered."""
        from fusionworker.core import admin

        client = redis.Redis.from_url(REDIS_URL)
        deadline = time.monotonic() + timeout
        try:
            while len(admin.workers(client, self.prefix)) < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fewer than {count} workers after {timeout} s")
                time.sleep(0.05)
        finally:
            client.close()

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """``bash -eu -c command`` in the example app's folder; what it leaves running
        is stopped (SIGTERM, then SIGKILL) before this returns."""
        proc = subprocess.Popen(["bash", "-euc", command], cwd=str(EXAMPLES), env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
        finally:
            _stop_group(proc)
        return subprocess.CompletedProcess(command, proc.returncode, out, "")

    def wait_for(self, condition: Any, timeout: float = 30.0) -> None:
        """Until ``condition()`` is true (TimeoutError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout} s: {condition}")
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:     # the whole tree at once: a pool's workers, their horses
            with contextlib.suppress(psutil.NoSuchProcess):
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
                for each in tree:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        each.kill()
                settle(tree)
            _stop_group(proc)
        client = redis.Redis.from_url(REDIS_URL)
        for prefix in self.prefixes:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
        client.close()
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name in os.listdir(self.bin):
            os.unlink(os.path.join(self.bin, name))
        os.rmdir(self.bin)


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process group of ``proc`` (a warm stop for workers), SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.05)
        else:
            continue
        break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def setup(namespace: dict[str, Any]) -> None:
    namespace["docs"] = DocEnv()
    namespace["__name__"] = "__docs__"
    # what the document registers (@job in its blocks, the example app) and imports
    # (the example app's package ``app``) is undone at its end: the process goes on
    # with other tests
    namespace["__saved__"] = (dict(catalog._REGISTRY), catalog._REFS, set(sys.modules))
    sys.path.insert(0, str(EXAMPLES))


def teardown(namespace: dict[str, Any]) -> None:
    namespace["docs"].close()
    with contextlib.suppress(ValueError):
        sys.path.remove(str(EXAMPLES))
    saved_registry, saved_refs, saved_modules = namespace["__saved__"]
    catalog._REGISTRY.clear()
    catalog._REGISTRY.update(saved_registry)
    catalog._REFS = saved_refs
    for name in set(sys.modules) - saved_modules:
        if name == "app" or name.startswith("app."):
            del sys.modules[name]


# --------------------------------------------------------------------------- evaluators

EXCERPT = re.compile(r"#\s*(examples/\S+\.py)\b")


def run_python(example: Example) -> str | None:
    """Sybil's Python evaluator, or the excerpt check (see the module docstring).
    Evaluators return a failure message (Sybil's convention) or None."""
    source = str(example.parsed)
    first, _, rest = source.partition("\n")
    match = EXCERPT.match(first)
    if match is None:
        PythonEvaluator()(example)
        return None
    text = (ROOT / match.group(1)).read_text(encoding="utf-8")
    if rest.strip() not in text:
        return f"this block is not a part of {match.group(1)}"
    return None


#: commands that change this machine: a block with one must be skipped explicitly
MACHINE_CHANGES = re.compile(r"(^|[\s;&|(])(sudo|pip3? install|useradd|systemctl (enable|start|"
                             r"restart|daemon-reload)|apt(-get)? install)\b", re.M)


def run_bash(example: Example) -> str | None:
    source = str(example.parsed)
    change = MACHINE_CHANGES.search(source)
    if change:
        return (f"not run: {change.group(2)!r} would change this machine; put "
                '<!-- skip: next "why" --> before the block')
    done = example.namespace["docs"].run(source)
    if done.returncode != 0:
        return f"exit status {done.returncode}:\n{done.stdout}"
    return None


# tokens that differ from run to run, each replaced by its kind before comparing
VOLATILE = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?( UTC|Z)?"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(\.\d+)?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s|m|h|d)\b"), "<age>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\b\d+\.\d+\.\d+\b"), "<version>"),
]


def _normalize(line: str) -> str:
    for pattern, kind in VOLATILE:
        line = pattern.sub(kind, line)
    return " ".join(line.split())


def same_output(expected: str, actual: str, prefix: str = "fw",
                redis_url: str = REDIS_URL) -> bool:
    """Line by line, spaces collapsed, after :data:`VOLATILE` tokens are replaced, this
    machine's worker names (``host.pid``), host name and pids by the docs' ``vm.4061``,
    ``vm`` and ``4061``, ``prefix`` (the document's key prefix) by ``fw`` and the test
    Redis's URL (``redis_url``) by the default one the docs show; a ``…`` in an
    expected line stands for any text."""
    actual = actual.replace(f"on {redis_url} (", "on redis://127.0.0.1:6379/0 (")
    host = socket.gethostname()
    actual = re.sub(rf"\b{re.escape(host)}\.\d+\b", "vm.4061", actual)
    actual = re.sub(rf"(?<=vm\.4061) +{re.escape(host)} +\d+\b", "  vm  4061", actual)
    actual = actual.replace(f"prefix {prefix})", "prefix fw)")
    want = [_normalize(line) for line in expected.splitlines()]
    got = [_normalize(line) for line in actual.splitlines()]
    if len(want) != len(got):
        return False
    # rows that start alike (a table's workers, in the order of their process ids)
    # may come in any order: each expected row matches one of its run
    start = 0
    while start < len(want):
        end = start + 1
        key = want[start].split(" ", 1)[0]
        while end < len(want) and key and want[end].split(" ", 1)[0] == key:
            end += 1
        left = got[start:end]
        for w in want[start:end]:
            pattern = ".*".join(re.escape(part) for part in w.split("…"))
            hit = next((g for g in left if re.fullmatch(pattern, g)), None)
            if hit is None:
                return False
            left.remove(hit)
        start = end
    return True


def run_console(example: Example) -> str | None:
    """``$ command`` lines and the output shown under each (see :func:`same_output`)."""
    docs: DocEnv = example.namespace["docs"]
    steps: list[tuple[str, list[str]]] = []
    for line in str(example.parsed).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    for command, shown in steps:
        change = MACHINE_CHANGES.search(command)
        if change:
            return f"not run: {change.group(2)!r} would change this machine; skip the block"
        done = docs.run(command)
        expected = "\n".join(shown).strip("\n")
        if done.returncode != 0 or not same_output(expected, done.stdout.strip("\n"),
                                                   docs.prefix):
            return (f"$ {command}\nexit status {done.returncode}; expected:\n"
                    f"{expected}\ngot:\n{done.stdout}")
    return None


class PythonBlocks(PythonCodeBlockParser):
    """Python blocks and doctests, with :func:`run_python` for the blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.codeblock_parser = CodeBlockParser("python", run_python)


DOCS = Sybil(
    parsers=[PythonBlocks(), CodeBlockParser("bash", run_bash), CodeBlockParser("sh", run_bash),
             CodeBlockParser("console", run_console), SkipParser()],
    patterns=["README.md", "docs/*.md"],
    path=str(ROOT),
    setup=setup,
    teardown=teardown,
    name="docs",
)


def mark_documents(items: list[pytest.Item]) -> None:
    """One xdist group per document: its blocks share a namespace, so they run in one
    process, in order. A document is told by its item's file (the node id before the
    first ``::``), whatever Sybil's version calls its items."""
    for item in items:
        if isinstance(item, SybilItem) or type(item).__name__.startswith("Sybil"):
            document = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(f"docs:{document}"))


def _traceback_filter(item: Any, excinfo: Any) -> Any:
    """Sybil's filter, or the whole traceback where it finds no frame of the example
    (it indexes past the end for some exceptions and stops the whole run)."""
    try:
        return _sybil_filter(item, excinfo)
    except IndexError:
        return excinfo.traceback


_sybil_filter = SybilItem._traceback_filter
SybilItem._traceback_filter = _traceback_filter  # type: ignore[method-assign]
