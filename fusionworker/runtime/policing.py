"""Policing the running slots (loop.py's ``_police``): each one's timeout, lease, kill's
SIGKILL escalation and horse tick. Each kill only signals (slot.py): the
loop never blocks on one."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from ..core.job import FailureReason
from .heartbeat import BUSY_AFTER
from .hookcalls import HookCalls
from .slot import Slot

log = logging.getLogger(__name__)


def police_slot(slot: Slot, now: float, *, interval: float, cold: bool, hooks: HookCalls,
                name: str) -> None:
    """Kill ``slot``'s horse past its deadline (``timeout``) or its lease (``lease``,
    not in a cold shutdown, which kills every horse anyway), escalate a kill that
    lingers, and run the horse tick when due (``on_horse_tick``: a reason kills)."""
    if now >= slot.deadline and not slot.killed:
        slot.kill(FailureReason.TIMEOUT)
    if now >= slot.lease_until and not slot.killed and not cold:
        log.warning("Worker %s: could not renew the lease of job %s in time; killing "
                    "its horse before the reaper may hand the job on", name, slot.job.id)
        slot.kill(FailureReason.LEASE)
    slot.escalate(now)
    if now >= slot.next_tick:     # a horse without its pid yet (launch.py): soon
        slot.next_tick = now + (interval if slot.pid > 0 else BUSY_AFTER)
        ticked = not slot.killed and slot.pid > 0
        reason = hooks("on_horse_tick", slot.job, slot.pid) if ticked else None
        if reason:
            slot.kill(reason)


def police_slots(slots: Sequence[Slot], now: float, *, interval: float, cold: bool,
                 hooks: HookCalls, name: str) -> float:
    """:func:`police_slot` for each running slot that is due (``now`` past its
    ``wakes_at``: before it, each check of police_slot finds nothing to do); answers the
    next time one is due."""
    due = math.inf
    for slot in slots:
        if slot.done or not slot.forked:
            continue
        wakes = slot.wakes_at()
        if now >= wakes:
            police_slot(slot, now, interval=interval, cold=cold, hooks=hooks, name=name)
            wakes = slot.wakes_at()
        if wakes < due:
            due = wakes
    return due
