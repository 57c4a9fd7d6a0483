"""The OpenAPI 3.1 description of ``/api/v1`` (served at ``/api/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from .. import __version__


def _op(summary: str, *, params: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None, action: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {
        "200": {"description": "OK (JSON)"},
        "400": {"$ref": "#/components/responses/Error"},
        "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"},
    }}
    if action:
        op["responses"]["403"] = {"$ref": "#/components/responses/Error"}
        op["responses"]["409"] = {"$ref": "#/components/responses/Error"}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"type": "object", "properties": body}}}}
    return op


def _p(name: str, where: str = "query", kind: str = "string", required: bool = False,
       help_: str = "") -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": {"type": kind}, "description": help_}


_ID = _p("id", "path", help_="job id")
_Q = _p("q", "path", help_="queue name")
_QUEUE = _p("queue", help_="queue of the job (default: search every queue)")
_NAME = _p("name", "path", help_="cron entry name")
_PAGE = [_p("page", kind="integer", help_="page of the queues by name (from 1)"),
         _p("per_page", kind="integer", help_="queues per page (1-500, default 50)")]
_MATCH = _p("match", help_="only the queues whose name holds this text (any case)")

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "fusionworker admin API", "version": __version__,
             "description": "Every CLI read and action of fusionworker over HTTP. "
                            "Errors are {\"error\": \"...\"} with a 4xx status."},
    "security": [{"bearer": []}, {"basic": []}],
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "FUSIONWORKER_WEB_TOKEN"},
            "basic": {"type": "http", "scheme": "basic",
                      "description": "FUSIONWORKER_WEB_USER and its password; state changes "
                                     "also need the X-CSRF-Token header (the csrf-token "
                                     "meta tag of a page) and an Origin of this site"},
        },
        "responses": {"Error": {"description": "error", "content": {"application/json": {
            "schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}}},
    },
    "paths": {
        "/api/v1/queues": {"get": _op("Queues: depth by priority band, scheduled, started, "
                                      "failed, finished, cap, paused, groups, oldest age; "
                                      "with page (and per_page), one page of them by name; "
                                      "without, every queue up to 500, else the first page "
                                      "of 500 with next_page and a Link rel=next header; "
                                      "with match, the queues whose name holds it",
                                      params=[*_PAGE, _MATCH])},
        "/api/v1/workers": {"get": _op("Workers: state, throttle reason, current job, "
                                       "heartbeat age")},
        "/api/v1/info": {"get": _op("The `info --json` document (same schema); with page "
                                    "(and per_page), the queues of that page only",
                                    params=_PAGE)},
        "/api/v1/chart": {"get": _op("Jobs finished and failed per minute (all queues, one, "
                                     "or one page of them by name)",
                                     params=[_p("minutes", kind="integer"), _p("queue"),
                                             *_PAGE, _MATCH])},
        "/api/v1/jobs": {"get": _op(
            "One page of a queue's jobs by status, newest (queued: best, scheduled: soonest) "
            "first. A function filter, or a priority filter outside `queued`, reads a window "
            "of 2000 ids from `start` and gives `next_start`.",
            params=[_p("queue", required=True),
                    _p("status", help_="queued|scheduled|deferred|held|started|failed|finished|canceled|"
                                      "stopped (those of failed: a scan, see next_start)"),
                    _p("priority", help_="an integer -1023..1023 or a band: high|normal|low"),
                    _p("function", help_="substring of module:function"),
                    _p("page", kind="integer"), _p("per_page", kind="integer"),
                    _p("start", kind="integer")])},
        "/api/v1/jobs/{id}": {
            "get": _op("One job: args, result, error, traceback, attempts, times, progress, meta, events",
                       params=[_ID, _QUEUE]),
            "delete": _op("Delete a job", params=[_ID, _QUEUE], action=True)},
        "/api/v1/jobs/{id}/live": {"get": _op(
            "What the job page polls: `changed: false` while the record's digest is `seen`, "
            "else the page's body (`html`) and the new digest",
            params=[_ID, _QUEUE, _p("seen")])},
        "/api/v1/queues/{q}/live": {"get": _op(
            "What a queue page polls: status counts and the stats line; the rows and pager "
            "(`rows`, `pager`) only when the page's ids differ from `seen`",
            params=[_Q, _p("status"), _p("priority"), _p("function"),
                    _p("page", kind="integer"), _p("per_page", kind="integer"), _p("seen")])},
        "/api/v1/failed": {"get": _op(
            "Failed jobs of every queue (or `queue`), newest first; filters `function`, "
            "`error_type` (substrings) and `since` (15m|1h|24h|7d); paged by `before` -> "
            "`next_before`",
            params=[_p("queue"), _p("function"), _p("error_type"), _p("since"),
                    _p("before", kind="number"), _p("per_page", kind="integer")])},
        "/api/v1/scheduled": {"get": _op(
            "Scheduled jobs by kind: `delayed` (not run yet) or `retries` (after a failed "
            "attempt), soonest first, per queue", params=[_p("kind")])},
        "/api/v1/batches": {"get": _op(
            "Batches whose callbacks have not fired, newest first; paged by `before`",
            params=[_p("before", kind="number"), _p("per_page", kind="integer")])},
        "/api/v1/batches/{id}": {"get": _op(
            "A batch: counts, sealed, fired, its callback jobs and the jobs that ended",
            params=[_p("id", "path", help_="batch id"), _p("queue", required=True)])},
        "/api/v1/workers/{name}": {"get": _op(
            "A worker: state, throttle, slots and their jobs, memory, heartbeat, recent "
            "outcomes", params=[_p("name", "path", help_="worker name")])},
        "/api/v1/history": {"get": _op(
            "Finished, failed, retried and duration percentiles (ms) per minute (`range=hour`) "
            "or 10 minutes (`range=day`), all queues or `queue`",
            params=[_p("queue"), _p("range")])},
        "/api/v1/jobs/{id}/run-now": {"post": _op(
            "A scheduled job (delayed or waiting for a retry) becomes due now",
            params=[_ID, _QUEUE], action=True)},
        "/api/v1/queues/{q}/rate-limit": {"put": _op(
            "Set or remove a rate limit: the queue's, each group's (`scope: every`) or one "
            "group's (`scope: group`, `group`)", params=[_Q],
            body={"rate": {"type": ["string", "null"]}, "scope": {"type": "string"},
                  "group": {"type": "string"}}, action=True)},
        "/api/v1/cron": {
            "get": _op("Cron entries"),
            "post": _op("Add (or replace) a cron entry", body={
                "name": {"type": "string"}, "schedule": {"type": "string"},
                "func": {"type": "string"}, "args": {"type": "array"},
                "kwargs": {"type": "object"}, "queue": {"type": "string"},
                "timezone": {"type": "string"}, "priority": {"type": "integer"}},
                action=True)},
        "/api/v1/cron/{name}/run": {"post": _op(
            "Enqueue a run of the entry now (its schedule unchanged)", params=[_NAME, _QUEUE],
            action=True)},
        "/api/v1/jobs/{id}/priority": {"put": _op(
            "Change the priority of a queued or scheduled job", params=[_ID, _QUEUE],
            body={"priority": {"type": "integer", "minimum": -1023, "maximum": 1023}},
            action=True)},
        "/api/v1/jobs/{id}/requeue": {"post": _op("Requeue a failed job", params=[_ID, _QUEUE],
                                                  action=True)},
        "/api/v1/jobs/{id}/cancel": {"post": _op("Cancel a queued, scheduled or held job",
                                                 params=[_ID, _QUEUE], action=True)},
        "/api/v1/jobs/{id}/stop": {"post": _op(
            "Stop a job: a running one is killed by its worker and ends stopped (no retry); "
            "a queued, scheduled or deferred one is canceled", params=[_ID, _QUEUE],
            action=True)},
        "/api/v1/jobs/{id}/hold": {"post": _op(
            "Hold a queued or scheduled job: never claimed until released, keeps its place",
            params=[_ID, _QUEUE], action=True)},
        "/api/v1/jobs/{id}/release": {"post": _op("Release a held job back to its place",
                                                  params=[_ID, _QUEUE], action=True)},
        "/api/v1/queues/{q}/requeue-failed": {"post": _op(
            "Requeue the given failed jobs, or every failed job when `ids` is absent",
            params=[_Q], body={"ids": {"type": "array", "items": {"type": "string"}}},
            action=True)},
        "/api/v1/queues/{q}/pause": {"post": _op("Pause a queue", params=[_Q], action=True)},
        "/api/v1/queues/{q}/unpause": {"post": _op("Unpause a queue", params=[_Q],
                                                   action=True)},
        "/api/v1/queues/{q}/max-active": {"put": _op(
            "Cap the jobs of the queue running at once (null: no cap)", params=[_Q],
            body={"max_active": {"type": ["integer", "null"], "minimum": 1}}, action=True)},
        "/api/v1/suspend": {"post": _op("Suspend every worker", action=True)},
        "/api/v1/resume": {"post": _op("Resume the workers", action=True)},
        "/api/v1/workers/{name}/shutdown": {"post": _op(
            "Ask one worker to stop as SIGTERM would: warm (its running jobs finish), or "
            "`mode=cold` (they go back); 404 when no live worker has that name",
            params=[_p("name", "path", help_="worker name"), _p("mode")], action=True)},
        "/api/v1/cron/{name}/pause": {"post": _op("Pause a cron entry", params=[_NAME, _QUEUE],
                                                  action=True)},
        "/api/v1/cron/{name}/resume": {"post": _op("Resume a cron entry",
                                                   params=[_NAME, _QUEUE], action=True)},
        "/api/v1/cron/{name}": {"delete": _op("Remove a cron entry", params=[_NAME, _QUEUE],
                                              action=True)},
    },
}
