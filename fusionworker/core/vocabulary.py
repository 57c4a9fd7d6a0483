"""The vocabulary of the stored text: ``StrEnum``s whose values are the strings kept in
Redis and compared by the Lua scripts (``tests/core/test_vocabulary.py`` checks every
status and reason literal of ``scripts/*.lua`` against them). Their members, listed
with their meaning, are the documentation of record."""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class _Vocabulary(StrEnum):
    """A ``StrEnum`` whose values are stored in Redis as they are."""

    @classmethod
    def read(cls, value: str) -> Self:
        """The member whose value is ``value``, for text read from Redis.

        Reading never fails: a value this version does not know (written by a
        newer version, or a middleware's own kill reason) becomes an unnamed
        member of the class that compares, prints and serializes as its text.
        Use ``cls(value)`` where an unknown value is an error (user input).
        """
        if type(value) is cls:      # a member already (the worker's own outcomes)
            return value
        known = cls._value2member_map_.get(value)   # what cls(value) looks up first
        if known is not None:
            return known  # type: ignore[return-value]
        try:
            return cls(value)
        except ValueError:
            member = str.__new__(cls, value)
            member._name_ = value
            member._value_ = value
            return member


class JobStatus(_Vocabulary):
    """``status`` of a job record, in lifecycle order."""

    QUEUED = "queued"          #: on the pending ZSET, ready to be claimed
    SCHEDULED = "scheduled"    #: waits for ``scheduled_for`` (delayed job or retry backoff)
    STARTED = "started"        #: claimed: a worker's horse runs it under a lease
    FINISHED = "finished"      #: returned; ``result`` holds the value
    FAILED = "failed"          #: final failure; ``failure_reason`` says how
    CANCELED = "canceled"      #: canceled before it ran (or a dependency failed)
    STOPPED = "stopped"        #: stopped while it ran (``job stop``): in ``failed``, no retry
    DEFERRED = "deferred"      #: waits on the jobs of ``depends_on``
    #: set aside by ``job hold`` (Job.hold): never claimed until released, keeps its place
    HELD = "held"


class FailureReason(_Vocabulary):
    """How an attempt ended: ``ok``, or how it ended without a result (``failure_reason``
    of the job record, ``reason`` of an ``Outcome``, its events, webhooks and span
    attributes). ``OutcomeReason`` is this class: one vocabulary."""

    OK = "ok"                  #: the job returned (an outcome's reason, never a record's)
    EXCEPTION = "exception"    #: the function raised (or its result could not be serialized)
    TIMEOUT = "timeout"        #: the hard time limit ran out
    SEGFAULT = "segfault"      #: the horse died of SIGSEGV
    CRASH = "crash"            #: the horse died of SIGBUS, SIGILL, SIGFPE or SIGABRT
    KILLED = "killed"          #: the horse died of another signal (the OOM killer?)
    EXIT = "exit"              #: the horse exited before it reported (``os._exit`` in the job)
    MEMORY = "memory"          #: the horse went over ``--max-horse-memory``
    REFUSED = "refused"        #: the function is not allowed or cannot be imported
    MALFORMED = "malformed"    #: the record cannot be read (bad JSON, missing field)
    LOST = "lost"              #: the job was taken back (reaped, deleted) while it ran
    ABANDONED = "abandoned"    #: its worker died and its attempts are used up (reaper)
    DEPENDENCY = "dependency"  #: a job it depends on failed (the job is ``canceled``)
    #: its ``ttl`` ran out before a worker took it (the job is ``canceled``, never ran)
    EXPIRED = "expired"
    #: the worker could not renew the lease: the horse is killed, the job re-queued
    LEASE = "lease"
    #: cold shutdown interrupted the job: re-queued, the attempt not counted
    SHUTDOWN = "shutdown"
    #: its async horse was killed for another job running beside it (``--async-per-horse``):
    #: re-queued, the attempt not counted
    NEIGHBOUR = "neighbour"
    STOPPED = "stopped"        #: stopped on request (``job stop``): its horse was killed


class WorkerState(_Vocabulary):
    """``state`` of a worker's heartbeat hash (and the ``fusionworker_worker_state`` gauge)."""

    STARTED = "started"        #: registered, not yet polling
    IDLE = "idle"              #: waiting for a job
    BUSY = "busy"              #: running a job for longer than a moment
    SUSPENDED = "suspended"    #: ``fusionworker suspend``: claims nothing
    THROTTLED = "throttled"    #: the resource governor holds claims back
    #: never written: what a reader shows for a worker whose heartbeat is older than
    #: its lease (dead, frozen or cut off from Redis: the reaper takes its jobs back)
    SILENT = "silent"


#: the reason of any attempt (``Outcome.reason``): the same vocabulary
OutcomeReason = FailureReason
