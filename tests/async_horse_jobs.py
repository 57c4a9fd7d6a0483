"""Job functions of the async-horse tests (``worker --async-per-horse K``), run by horses."""

from __future__ import annotations

import asyncio
import os
import time

from fusionworker import current_job


async def stamp(seconds):
    """Sleep on the loop; [pid, start, end, the job id current_job() gave after the await]."""
    start = time.time()
    await asyncio.sleep(seconds)
    ctx = current_job()
    return [os.getpid(), start, time.time(), ctx.id if ctx is not None else None]


async def tagged(tag, seconds):
    """Put ``tag`` in this job's meta, let the other tasks run, read it back."""
    ctx = current_job()
    ctx.meta["tag"] = tag
    ctx.set_progress(0.5, tag)
    await asyncio.sleep(seconds)
    again = current_job()
    return [os.getpid(), again.id, again.meta.get("tag"), again.progress_message]


async def block(seconds):
    """Hold the event loop (a blocking call in async code)."""
    time.sleep(seconds)
    return os.getpid()


def sync_stamp(seconds):
    """A sync job: [pid, start, end]."""
    start = time.time()
    time.sleep(seconds)
    return [os.getpid(), start, time.time()]


def _push(url, key):
    import redis

    redis.Redis.from_url(url).rpush(key, os.getpid())


async def pushed_stamp(url, key, seconds):
    """Push the pid (before the first await), then :func:`stamp`."""
    _push(url, key)
    return await stamp(seconds)


async def pushed_block(url, key, seconds):
    """Push the pid, then hold the event loop for ``seconds``."""
    _push(url, key)
    time.sleep(seconds)
    return os.getpid()


async def kill_own_horse(url, key):
    """Push the pid, let the mates start, then SIGKILL this horse (a crash nobody asked
    for: the worker cannot tell which job of the horse did it)."""
    import signal

    _push(url, key)
    await asyncio.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)


async def enqueue_child_after(url, prefix, seconds):
    """Sleep on the loop (the other tasks run meanwhile), then enqueue a job on queue
    'child' with settings from the environment; the child's id."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue
    from tests.jobs_redis import _redis

    await asyncio.sleep(seconds)
    settings = load_settings(redis_url=url, prefix=prefix, allowed_modules=("tests",))
    return Queue("child", _redis(url), settings=settings, events=False).enqueue(
        "tests.jobs:noop").id


async def big_stamp(data, seconds):
    """A job whose arguments are larger than half a pipe: [pid, start, end, len(data)]."""
    start = time.time()
    await asyncio.sleep(seconds)
    return [os.getpid(), start, time.time(), len(data)]


async def stubborn(url, key, seconds):
    """Push the pid, then sleep; a cancel is caught (``cancelled`` pushed on ``key``)
    and the job sleeps on: a task that swallows CancelledError."""
    _push(url, key)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        import redis

        redis.Redis.from_url(url).rpush(key, "cancelled")
        await asyncio.sleep(seconds)
    return os.getpid()


async def stop_self(url, prefix, seconds):
    """Ask for this job's own stop (``Queue.stop``), then return after ``seconds``: its
    end races the cancel that stop sends to its task. [pid, whether it returned]."""
    from fusionworker.core.config import load_settings
    from fusionworker.core.queue import Queue
    from tests.jobs_redis import _redis

    ctx = current_job()
    settings = load_settings(redis_url=url, prefix=prefix, allowed_modules=("tests",))
    Queue(ctx.queue, _redis(url), settings=settings, events=False).stop(ctx.id)
    if seconds:
        await asyncio.sleep(seconds)
    return os.getpid()


async def die_on_cancel(url, key, seconds):
    """Push the pid, then sleep; at a cancel, SIGKILL this horse (it dies after the
    cancel frame came, before the job's report)."""
    import signal

    _push(url, key)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        import redis

        redis.Redis.from_url(url).rpush(key, "dying")
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


async def swallow_and_return(url, key, seconds):
    """Push the pid, then sleep; a cancel is caught and the job returns a value at once
    (it swallowed the CancelledError, and ended)."""
    _push(url, key)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        return "swallowed"
    return "slept"


async def block_then_sleep(url, key, block_seconds, seconds):
    """Push the pid, hold the event loop ``block_seconds`` (the horse names this job as
    blocking it), then sleep on the loop like any other job: the pid."""
    _push(url, key)
    time.sleep(block_seconds)
    await asyncio.sleep(seconds)
    return os.getpid()


async def kill_own_horse_after(url, key, seconds):
    """Push the pid, sleep on the loop, then SIGKILL this horse."""
    import signal

    _push(url, key)
    await asyncio.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


async def sleep_then_block(url, key, seconds, block_seconds):
    """Push the pid, sleep on the loop, then hold it ``block_seconds``."""
    _push(url, key)
    await asyncio.sleep(seconds)
    time.sleep(block_seconds)
    return os.getpid()


async def flood_report_pipe(mib, seconds):
    """The hostile async job (tests.jobs.flood_report_pipe), on its horse's loop."""
    from tests.jobs import flood_report_pipe as flood

    return flood(mib, seconds)


async def exit_now(code):
    """The horse ends at once, before its worker can have read its handover."""
    os._exit(int(code))


async def cancel_mates(url, key):
    """Push the pid, let the mates start, then cancel every other task of the loop (its
    mates' jobs), and return."""
    _push(url, key)
    await asyncio.sleep(0.3)
    me = asyncio.current_task()
    hit = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in hit:
        task.cancel()
    return len(hit)


async def stop_loop(url, key):
    """Push the pid, let the mates start, then stop the event loop under them."""
    _push(url, key)
    await asyncio.sleep(0.3)
    asyncio.get_running_loop().stop()
    await asyncio.sleep(5)


async def interrupt_loop(url, key):
    """Push the pid, then leave a task that raises KeyboardInterrupt out of the loop."""
    async def boom():
        raise KeyboardInterrupt

    _push(url, key)
    await asyncio.sleep(0.3)
    asyncio.get_running_loop().create_task(boom())
    await asyncio.sleep(5)


async def orphan_blocker(url, key, delay, block):
    """Push the pid and return at once, leaving a task that later holds the loop for
    ``block`` seconds (it belongs to no running job by then)."""
    async def later():
        await asyncio.sleep(delay)
        time.sleep(block)

    _push(url, key)
    asyncio.get_running_loop().create_task(later())
    return "planted"


async def leave_stubborn_task(url, key):
    """Push the pid and return, leaving a task that swallows every cancel, for good."""
    async def stubborn_forever():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    _push(url, key)
    asyncio.get_running_loop().create_task(stubborn_forever())
    return os.getpid()


async def forge_mates(url, key):
    """Push the pid, let the mates start, then write a success report line for every
    board entry but knowing no mate's job id."""
    _push(url, key)
    await asyncio.sleep(0.3)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                for entry in range(16):
                    os.write(fd, b'%d {"ok": true, "reason": "ok", "result": "\\"forged\\""}\n'
                             % entry)
        except OSError:
            pass
    await asyncio.sleep(1.0)
    return "forger"


async def raising_factory(url, key, seconds):
    """Push the pid, set a task factory on the loop that refuses every task, and stay
    ``seconds`` (the next jobs of the horse arrive meanwhile)."""
    def refuse(loop, coro, **kwargs):
        coro.close()
        raise RuntimeError("factory says no")

    _push(url, key)
    asyncio.get_running_loop().set_task_factory(refuse)
    await asyncio.sleep(seconds)
    return "set"
