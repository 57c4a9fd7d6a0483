"""A slot's life cycle (runtime/slot.py): one state, changed only along its transitions."""

from __future__ import annotations

import pytest

from fusionworker.core.job import Job
from fusionworker.runtime.exits import HorseExit
from fusionworker.runtime.protocol import ExitNotice
from fusionworker.runtime.slot import Slot, SlotState, SlotStateError


def _job() -> Job[None]:
    return Job(id="j", queue="q", func="m:f")


def test_a_slot_asked_of_the_fork_server_runs_once_bound_then_ends():
    slot = Slot.asked(_job(), origin=None)  # type: ignore[arg-type]
    assert (slot.state, slot.forked, slot.done) == (SlotState.ASKED, True, False)
    slot.bind(2**22 + 7)        # a pid nobody has: its signals find nothing
    assert (slot.state, slot.pid, slot.done) == (SlotState.RUNNING, 2**22 + 7, False)
    slot.exited(ExitNotice(slot.pid, 0, b""))
    assert (slot.state, slot.done) == (SlotState.ENDED, True)


def test_a_slot_whose_fork_server_died_is_orphaned_and_final():
    slot = Slot.asked(_job(), origin=None)  # type: ignore[arg-type]
    slot.bind(2**22 + 8)
    slot.origin_died()
    assert (slot.state, slot.done) == (SlotState.ORPHANED, True)
    with pytest.raises(SlotStateError, match="from orphaned to ended"):
        slot.exited(ExitNotice(slot.pid, 0, b""))


@pytest.mark.parametrize("step", ["exited", "origin_died"])
def test_a_slot_not_answered_yet_cannot_end(step):
    slot = Slot.asked(_job(), origin=None)  # type: ignore[arg-type]
    with pytest.raises(SlotStateError, match="from asked to"):
        if step == "exited":
            slot.exited(ExitNotice(1, 0, b""))
        else:
            slot.origin_died()
    assert slot.state is SlotState.ASKED      # a refused move changes nothing


def test_a_slot_whose_server_died_unanswered_is_orphaned_without_a_signal():
    # its pid is not known: nothing is signalled (pid 0 would be the worker's own group)
    slot = Slot.asked(_job(), origin=None)  # type: ignore[arg-type]
    slot.unanswered("w")
    assert (slot.state, slot.done, slot.pid) == (SlotState.ORPHANED, True, 0)
    exit_ = slot.outcome(cold=False)
    assert not exit_.ok and exit_.shared      # not alone: a shared death, given back
    with pytest.raises(SlotStateError, match="from orphaned to orphaned"):
        slot.unanswered("w")


def test_a_slot_that_ended_at_birth_takes_no_horse():
    slot = Slot.ended(_job(), HorseExit(ok=True, reason="ok"))
    assert (slot.state, slot.done, slot.forked) == (SlotState.ENDED, True, False)
    with pytest.raises(SlotStateError, match="from ended to running"):
        slot.bind(2**22 + 9)
