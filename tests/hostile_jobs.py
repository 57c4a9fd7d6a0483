"""Jobs that try to harm the jobs beside them (issue #31's hostile user), run by horses.

Each says what it reached (Redis list ``key``) before it harms, so a test can check
that it had its chance.
"""

from __future__ import annotations

import json
import os
import signal
import time

import redis

GARBAGE = b"\xff" * 4096


def _push(url, key, value):
    redis.Redis.from_url(url).rpush(key, value)


def scribble(url, key):
    """Write garbage into every descriptor this process holds above 2, and into every
    mapping of the deadline board (through /proc/self/mem, which ignores a mapping's
    protection when the file is writable); record what it wrote into."""
    hit = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            os.write(fd, GARBAGE)
            hit.append(target)
        except OSError:
            pass
    with open("/proc/self/maps") as fh:
        boards = [line.split()[0] for line in fh if "fusionworker-deadlines" in line]
    for span in boards:
        start, end = (int(x, 16) for x in span.split("-"))
        try:
            with open("/proc/self/mem", "r+b", buffering=0) as mem:
                mem.seek(start)
                mem.write(b"\xff" * (end - start))
            hit.append("board")
        except OSError:
            pass
    _push(url, key, json.dumps(hit))     # its own connection, after it scribbled
    return hit


def kill_fork_server(url, key, started_key=None, started=0):
    """SIGKILL the process that forked this horse (the fork server), once ``started``
    entries are in ``started_key`` (its neighbours run), then wait to die."""
    r = redis.Redis.from_url(url)
    give_up = time.monotonic() + 60
    while started_key and r.llen(started_key) < started and time.monotonic() < give_up:
        time.sleep(0.05)
    _push(url, key, os.getppid())
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)


def kill_worker(url, key, started_key=None, started=0):
    """SIGKILL the worker parent (the fork server's parent), once ``started`` entries are
    in ``started_key`` (its neighbours run), then wait to die."""
    r = redis.Redis.from_url(url)
    give_up = time.monotonic() + 60
    while started_key and r.llen(started_key) < started and time.monotonic() < give_up:
        time.sleep(0.05)
    with open(f"/proc/{os.getppid()}/stat") as fh:
        worker = int(fh.read().rsplit(")", 1)[1].split()[1])
    _push(url, key, worker)
    os.kill(worker, signal.SIGKILL)
    time.sleep(30)


def patch_dumps(url, key):
    """Replace fusionworker.core.codec.dumps: every result says "PATCHED"."""
    from fusionworker.core import codec

    codec.dumps = lambda value, where="value": '"PATCHED"'
    _push(url, key, os.getpid())
    return "mine"


def stamped(url, key, value, seconds, then=None):
    """Append ``tick:value:pid:monotonic`` every 0.1 s for ``seconds`` (two runs of one job
    at once show as interleaved ticks of two pids), then ``done:value:pid``. With
    ``then``: a run whose first tick finds others in ``key`` (a rerun) ticks for ``then`` s."""
    r = redis.Redis.from_url(url)
    start = time.monotonic()
    end, ticks = start + seconds, 0
    while time.monotonic() < end:
        ticked = r.rpush(key, f"tick:{value}:{os.getpid()}:{time.monotonic()}")
        ticks += 1
        if then is not None and ticks == 1 and ticked > 1:
            end = start + then
        time.sleep(0.1)
    r.rpush(key, f"done:{value}:{os.getpid()}")
    return value


def oom_score():
    """This horse's oom_score_adj and its parent's (the fork server)."""
    def read(pid):
        with open(f"/proc/{pid}/oom_score_adj") as fh:
            return int(fh.read())
    return [read("self"), read(os.getppid())]


def pid():
    """The horse's pid (a list: a result of its own shape, never a patched one)."""
    return [os.getpid()]


def parent():
    """The pid of the process that forked this horse (a list: a result of its own shape)."""
    return [os.getppid()]


def _pipes():
    """This process's pipe descriptors above 2 (its report pipe among them)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                out.append(fd)
        except OSError:
            pass
    return out


def _write_pipes(data):
    for fd in _pipes():
        try:
            os.write(fd, data)
        except OSError:
            pass


def deep_report(url, key, depth=20000):
    """Write, as its report, JSON nested past any parser's depth, and exit."""
    _push(url, key, "deep report")
    _write_pipes(b"[" * depth)
    os._exit(0)


def deep_frame(url, key, depth=20000):
    """Write a progress frame nested past any parser's depth, then return normally."""
    _push(url, key, "deep frame")
    _write_pipes(b'\x1e{"meta":' + b"[" * depth + b"]" * depth + b"}\n")
    return "after the frame"


def forged_reason(url, key, reason):
    """Write a report that claims a reason only the worker gives (``neighbour``:
    given back uncharged, at its place), and exit before its real one."""
    from fusionworker import current_job

    _push(url, key, reason)
    _write_pipes(json.dumps({"ok": False, "reason": reason, "error_type": "X",
                             "job": current_job().id,     # its own id: the report is its
                             "error_message": ["not", "text"], "retry_delay": [1]}).encode())
    os._exit(0)


def forged_report(result, then=1.0):
    """Write a report of its own (with a stay: a warm horse's next job would be sent),
    then run on and return: the horse's true report comes ``then`` s later, on the pipe
    that by then carries the next job's. ``result``: with ``"own"``, the report names
    this job; else none."""
    from fusionworker import current_job

    doc = {"ok": True, "reason": "ok", "result": json.dumps("forged")}
    if result == "own":
        doc["job"] = current_job().id
    _write_pipes(json.dumps(doc).encode() + b"\n")
    time.sleep(then)
    return "its true result"


def leave_group(url, key, seconds):
    """Ignore the time limit's signals and try to move into the fork server's process
    group, out of reach of a kill of the horse's own group; record how that went."""
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.setpgid(0, os.getpgid(os.getppid()))
        _push(url, key, "moved")
    except OSError as exc:
        _push(url, key, f"refused: {exc.strerror}")
    time.sleep(seconds)
    return "outlived its time limit"


def daemon_on_pipes(seconds=3.0):
    """Leave a daemon (a double fork with setsid: init's child, out of the horse's group)
    holding every descriptor the horse had, its pipes among them; return the horse's pid."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(seconds)
        os._exit(0)
    os.waitpid(child, 0)
    return [os.getpid()]


def pid_after(seconds):
    """The horse's pid, after ``seconds`` (a neighbour that runs long enough to be hit)."""
    time.sleep(seconds)
    return [os.getpid()]
