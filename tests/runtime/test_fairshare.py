"""Fair share by use (issue 34, ``worker --fair``): the next claim goes to the queue
whose recent worker time, divided by its weight, is lowest; the use lives in Redis
(``fw:{q}:use``, written with each outcome) so every worker sees the same share."""

from __future__ import annotations

import pytest

from fusionworker.core.config import ConfigError, load_settings
from fusionworker.runtime.worker import Worker


def _time_shares(jobs: dict[str, list]) -> dict[str, float]:
    """Worker seconds each queue got until the first of them ran dry (claim to outcome,
    the jobs' own stamps), so both were saturated over the whole window."""
    end = min(max(j.ended_at for j in js) for js in jobs.values())
    return {name: sum(max(0.0, min(j.ended_at, end) - j.started_at)
                      for j in js if j.started_at < end)
            for name, js in jobs.items()}


def _started_by_turns(jobs: dict[str, list]) -> list[str]:
    """The queue of each job in the order the jobs started."""
    return [name for _, name in sorted((j.started_at, name)
                                       for name, js in jobs.items() for j in js)]


def _run(queue, burst, settings, fair: bool, tag: str
         ) -> tuple[dict[str, float], list[str]]:
    slow, fast = queue(f"slow{tag}"), queue(f"fast{tag}")
    ids = {f"slow{tag}": [slow.enqueue("tests.jobs:sleep", 0.3).id for _ in range(12)],
           f"fast{tag}": [fast.enqueue("tests.jobs:sleep", 0.03).id for _ in range(120)]}
    order = "fair" if fair else "round-robin"
    burst(f"slow{tag},fast{tag}", settings=settings.replace(queue_order=order))
    queues = {f"slow{tag}": slow, f"fast{tag}": fast}
    jobs = {name: [queues[name].fetch_job(i) for i in ids[name]] for name in ids}
    return _time_shares(jobs), _started_by_turns(jobs)


@pytest.mark.slow
def test_two_saturated_queues_of_equal_weight_get_equal_worker_time_under_fair(
        queue, burst, settings):
    fair, _ = _run(queue, burst, settings, fair=True, tag="f")
    ratio = max(fair.values()) / min(fair.values())
    print(f"fair: {fair} ratio {ratio:.2f}")
    assert ratio <= 1.5, fair
    rr, order = _run(queue, burst, settings, fair=False, tag="r")
    print(f"round-robin: {rr} ratio {rr['slowr'] / rr['fastr']:.2f}")
    # round-robin takes the queues by turns, whatever their jobs cost: one slot runs a
    # slow job, a fast one, a slow one... until the slow queue runs dry, so the slow
    # queue gets its jobs' cost over the fast one's (10x; the claim-to-outcome time of
    # a fresh horse, ~0.1 s on a loaded machine, brings it near 3x)
    assert order[:24] == ["slowr", "fastr"] * 12 or order[:24] == ["fastr", "slowr"] * 12
    assert rr["slowr"] / rr["fastr"] >= 2.0, rr


def test_weights_are_shares_of_the_use_read_from_redis(queue, burst, settings, r):
    """sms:3,email:1: the next claim goes to the queue whose use / weight is lowest, as
    read back from Redis by a second worker that never ran a job of either (the share
    is the deployment's, not one worker's)."""
    sms, email = queue("sms"), queue("email")
    for _ in range(4):
        sms.enqueue("tests.jobs:sleep", 0.05)
    email.enqueue("tests.jobs:sleep", 0.05)
    fair = settings.replace(queue_order="fair")
    burst("sms", settings=fair)                      # sms has used worker time, email none
    used = float(r.hget(sms.qkeys.use, "v"))
    assert used > 4 * 0.05 and not r.exists(email.qkeys.use)
    other = Worker("sms:3,email:1", r, settings=fair, burst=True, middleware=[])
    other.claimer.fair.refresh(r, other.claimer.queue_names)
    plan = other.claimer.plan(1)
    assert plan.calls == [("email", 1)]              # the least used, per weight
    r.hset(email.qkeys.use, mapping={"v": f"{used / 2:.6f}",
                                     "t": r.hget(sms.qkeys.use, "t")})
    other.claimer.fair.refresh(r, other.claimer.queue_names)
    assert other.claimer.plan(1).calls == [("sms", 1)]   # used/3 < (used/2)/1


def test_fair_and_strict_order_do_not_mix_and_bad_values_are_one_line(r, settings):
    with pytest.raises(ValueError, match="give the queues with -q"):
        Worker(["a", "b"], r, settings=settings.replace(queue_order="fair"), strict=True,
               middleware=[])
    with pytest.raises(ConfigError, match="FUSIONWORKER_QUEUE_ORDER='sideways': must be one"):
        load_settings(environ={"FUSIONWORKER_QUEUE_ORDER": "sideways"})
