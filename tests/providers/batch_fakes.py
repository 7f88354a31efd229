"""The three providers' batch APIs on the fake LLM server, for driving the real SDKs.

`FakeBatchServer` is a FakeLLMServer (same scripts and responders, so the same prompt gets the
same answer call by call and in a batch, with the same usage) that also serves:

- openai:    POST /v1/files (multipart, purpose "batch"), GET /v1/files/{id}/content,
             POST /v1/batches (its `metadata` kept and echoed), GET /v1/batches/{id},
             POST /v1/batches/{id}/cancel, GET /v1/batches (`after`, `limit`; `has_more`,
             `first_id`, `last_id`)
- anthropic: POST /v1/messages/batches, GET /v1/messages/batches/{id},
             POST /v1/messages/batches/{id}/cancel, GET /v1/messages/batches/{id}/results,
             GET /v1/messages/batches (`after_id`, `before_id`, `limit`; `has_more`,
             `first_id`, `last_id`)
- gemini:    POST /v1beta/models/{model}:batchGenerateContent (its `displayName` required,
             kept and echoed), GET /v1beta/batches/{id}, POST /v1beta/batches/{id}:cancel,
             GET /v1beta/batches (`pageSize`, `pageToken`; `operations`, `nextPageToken`), in
             the Gemini Developer API's operation form

A batch's requests are answered when it ends, each from the flavor's script or responder as a
call would be: an Answer succeeds, an HttpError is that request's error (in OpenAI's error
file, Anthropic's `errored` result, Gemini's inlined `error`), a Hang never runs (expired).
`BatchQuirks` (per flavor, set by a test) adds the services' quirks: polls that find the batch
still processing, results in another order than submitted, requests that expire, OpenAI's
output file id appearing some polls after `completed`, cancellation with some requests
answered before it, and a request limit the fake enforces as the vendor does (HTTP 400).

Lists give the newest batches first, each as its last poll (or its creation, or its cancel)
showed it. A batch's creation time is `FakeBatchServer.now()` when it is created: the real
clock, unless a test sets another (to place batches before or after a lookup's window, or to
keep a creation time fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from fakes import (
    ANSWER_BODIES,
    ERROR_BODIES,
    Answer,
    Drop,
    FakeLLMServer,
    Hang,
    HttpError,
    Recorded,
    Step,
    provider_settings,
)

from tierank.server.judges.batches import BATCH_PROVIDERS

BATCH_FLAVORS = BATCH_PROVIDERS  # every vendor whose batch API the server speaks
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class BatchQuirks:
    # Polls (GETs of the batch) that find it still processing before it ends.
    open_polls: int = 2
    # Results in the reverse of the submitted order (the vendors promise no order).
    reorder: bool = True
    # Custom ids whose requests are never run: the batch ends as expired (every one if True).
    expire: frozenset[str] | bool = frozenset()
    # OpenAI: polls after the batch says `completed` on which its file ids are still absent.
    late_files_polls: int = 0
    # After a cancel: polls that find it cancelling, and how many of its requests (in
    # submission order) were answered before it; the rest are cancelled.
    cancelling_polls: int = 1
    answered_before_cancel: int = 0
    # Requests a batch may carry; more is refused with HTTP 400, as the vendor refuses it.
    max_requests: int | None = None
    # Polls answered HTTP 429 with Retry-After before the batch is looked at.
    refused_polls: int = 0
    retry_after_s: int = 7
    # Batch creations answered with HTTP `refused_status` (503: an overloaded service; 500: one
    # that fails) before one is made; nothing is recorded for them.
    refused_creates: int = 0
    refused_status: int = 503
    creates_refused: int = 0
    # OpenAI and Gemini: the whole batch fails with this message on its first poll (OpenAI's
    # input validation, a Gemini job that fails); Anthropic validates when it is created.
    fail: str | None = None
    # Seconds between recording a created batch and answering its create request: the vendor
    # has the batch while its creator still waits for the id (a test kills the creator then).
    create_delay_s: float = 0.0
    # The most batches a list page holds, whatever the caller asks (the vendors may return
    # fewer than asked): a small one makes a lookup page through a few batches.
    list_page_max: int | None = None


@dataclass
class FakeBatch:
    id: str
    flavor: str
    model: str
    # (custom id, the request as a call's Recorded) in submission order.
    entries: list[tuple[str, Recorded]]
    # Unix time of its creation.
    created_at: float
    # OpenAI's metadata, Gemini's display name.
    metadata: dict[str, str] = field(default_factory=dict)
    display_name: str = ""
    # The batch as it was last shown (created, polled, cancelled): what a list shows of it.
    view: dict[str, Any] = field(default_factory=dict)
    polls: int = 0
    cancel_at_poll: int | None = None
    # Per custom id, once ended: the step played (Answer, HttpError) or "expired"/"cancelled".
    outcomes: dict[str, Step | str] | None = None
    ended_at_poll: int | None = None
    input_file_id: str = ""
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def final(self) -> str:
        """expired, cancelled or completed, once ended."""
        assert self.outcomes is not None
        if self.cancel_at_poll is not None:
            return "cancelled"
        if "expired" in self.outcomes.values():
            return "expired"
        return "completed"


class FakeBatchServer(FakeLLMServer):
    def __init__(self) -> None:
        super().__init__()
        self.quirks: dict[str, BatchQuirks] = {flavor: BatchQuirks() for flavor in BATCH_FLAVORS}
        self.batches: dict[str, FakeBatch] = {}
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self._ids = itertools.count(1)
        # The clock that stamps creation times (batches and files).
        self.now: Callable[[], float] = time.time
        # List pages served, per flavor.
        self.list_pages: dict[str, int] = dict.fromkeys(BATCH_FLAVORS, 0)

    # -- routes ---------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._openai_upload)
        app.router.add_get("/v1/files/{id}/content", self._openai_download)
        app.router.add_post("/v1/batches", self._openai_create)
        app.router.add_get("/v1/batches", self._openai_list)
        app.router.add_get("/v1/batches/{id}", self._openai_get)
        app.router.add_post("/v1/batches/{id}/cancel", self._openai_cancel)
        app.router.add_post("/v1/messages/batches", self._anthropic_create)
        app.router.add_get("/v1/messages/batches", self._anthropic_list)
        app.router.add_get("/v1/messages/batches/{id}", self._anthropic_get)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._anthropic_cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self._anthropic_results)
        app.router.add_post("/v1beta/models/{model}:batchGenerateContent", self._gemini_create)
        app.router.add_get("/v1beta/batches", self._gemini_list)
        app.router.add_get("/v1beta/batches/{id}", self._gemini_get)
        app.router.add_post("/v1beta/batches/{id}:cancel", self._gemini_cancel)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    def _batch(self, request: web.Request, flavor: str) -> FakeBatch:
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.flavor != flavor:
            raise web.HTTPNotFound(text=json.dumps({"error": {"message": "no such batch"}}))
        return batch

    def _add(
        self, flavor: str, model: str, entries: list[tuple[str, Recorded]], prefix: str
    ) -> FakeBatch:
        batch = FakeBatch(self._new_id(prefix), flavor, model, entries, self.now())
        self.batches[batch.id] = batch
        return batch

    async def _created(self, batch: FakeBatch, body: dict[str, Any]) -> web.StreamResponse:
        """The answer to a create request, once the create delay has passed or the server
        stops; the batch is recorded, and listed, from the start."""
        batch.view = body
        delay = self.quirks[batch.flavor].create_delay_s
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return web.json_response(body)

    @staticmethod
    def _shown(batch: FakeBatch, body: dict[str, Any]) -> web.StreamResponse:
        batch.view = body
        return web.json_response(body)

    def _newest_first(self, flavor: str) -> list[FakeBatch]:
        """The flavor's batches as the vendors list them."""
        return [b for b in reversed(self.batches.values()) if b.flavor == flavor]

    def _listed(self, flavor: str, after: str | None) -> list[FakeBatch] | None:
        """The flavor's batches, newest first, from the one after the cursor `after` (None: an
        unknown cursor)."""
        listed = self._newest_first(flavor)
        if not after:
            return listed
        ids = [b.id for b in listed]
        return listed[ids.index(after) + 1 :] if after in ids else None

    def _page_size(self, flavor: str, asked: str | None, default: int, most: int) -> int | None:
        """The size of the page served for `asked` (None: not a count from 1 to `most`)."""
        self.list_pages[flavor] += 1
        size = default if asked is None else int(asked) if asked.isdigit() else 0
        if not 1 <= size <= most:
            return None
        return min(size, self.quirks[flavor].list_page_max or size)

    def _too_many(self, flavor: str, count: int) -> str | None:
        limit = self.quirks[flavor].max_requests
        if limit is not None and count > limit:
            return f"a batch may hold at most {limit} requests, this one holds {count}"
        return None

    # -- the batch lifecycle, shared by every flavor --------------------------------------------

    def _refused(self, flavor: str) -> web.StreamResponse | None:
        """HTTP 429 for a poll, while the flavor's refused polls last."""
        quirks = self.quirks[flavor]
        if quirks.refused_polls <= 0:
            return None
        quirks.refused_polls -= 1
        error = HttpError(429, {"Retry-After": str(quirks.retry_after_s)}, "slow down")
        return web.json_response(
            ERROR_BODIES[flavor](error), status=429, headers=dict(error.headers)
        )

    def _advance(self, batch: FakeBatch) -> str:
        """One poll: returns "open", "cancelling", "failed" or "ended" (answering the requests
        then)."""
        quirks = self.quirks[batch.flavor]
        batch.polls += 1
        if quirks.fail is not None and batch.outcomes is None:
            return "failed"
        if batch.outcomes is not None:
            return "ended"
        if batch.cancel_at_poll is not None:
            if batch.polls - batch.cancel_at_poll <= quirks.cancelling_polls:
                return "cancelling"
            self._end(batch, answered=quirks.answered_before_cancel)
            return "ended"
        if batch.polls <= quirks.open_polls:
            return "open"
        self._end(batch, answered=len(batch.entries))
        return "ended"

    def _end(self, batch: FakeBatch, answered: int) -> None:
        quirks = self.quirks[batch.flavor]
        outcomes: dict[str, Step | str] = {}
        for n, (custom_id, recorded) in enumerate(batch.entries):
            if n >= answered:
                outcomes[custom_id] = "cancelled"
            elif quirks.expire is True or (
                not isinstance(quirks.expire, bool) and custom_id in quirks.expire
            ):
                outcomes[custom_id] = "expired"
            else:
                self._requests[batch.flavor].append(recorded)
                step = self._next_step(batch.flavor, recorded)
                if isinstance(step, Drop):
                    step = HttpError(500, message="the request's worker crashed")
                outcomes[custom_id] = "expired" if isinstance(step, Hang) else step
        if quirks.reorder:
            outcomes = dict(reversed(list(outcomes.items())))
        batch.outcomes = outcomes
        batch.ended_at_poll = batch.polls

    def _cancel(self, batch: FakeBatch) -> None:
        if batch.outcomes is None and batch.cancel_at_poll is None:
            batch.cancel_at_poll = batch.polls

    def _counts(self, batch: FakeBatch) -> dict[str, int]:
        """answered / errored / expired / cancelled, once ended."""
        counts = {"answered": 0, "errored": 0, "expired": 0, "cancelled": 0}
        for outcome in (batch.outcomes or {}).values():
            if isinstance(outcome, Answer):
                counts["answered"] += 1
            elif isinstance(outcome, str):
                counts[outcome] += 1
            else:
                counts["errored"] += 1
        return counts

    # -- openai ---------------------------------------------------------------------------------

    async def _openai_upload(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, web.FileField) or purpose != "batch":
            return _openai_bad_request("a file with purpose 'batch' is required")
        content = upload.file.read()
        file_id = self._new_id("file-")
        self.files[file_id] = (str(purpose), content)
        return web.json_response(
            _openai_file(file_id, upload.filename, content, "batch", self.now())
        )

    async def _openai_download(self, request: web.Request) -> web.StreamResponse:
        held = self.files.get(request.match_info["id"])
        if held is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=held[1], content_type="application/octet-stream")

    async def _openai_create(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        held = self.files.get(body.get("input_file_id", ""))
        if held is None or held[0] != "batch":
            return _openai_bad_request("input_file_id must name a file uploaded for 'batch'")
        if body.get("completion_window") != "24h":
            return _openai_bad_request("completion_window must be 24h")
        lines = [json.loads(line) for line in held[1].decode().splitlines() if line.strip()]
        problem = _openai_input_problem(lines, body.get("endpoint")) or self._too_many(
            "openai", len(lines)
        )
        if problem:
            return _openai_bad_request(problem)
        entries = [
            (
                line["custom_id"],
                Recorded("openai", line["url"], dict(request.headers), line["body"], 0.0),
            )
            for line in lines
        ]
        metadata = body.get("metadata") or {}
        if not _openai_metadata_ok(metadata):
            return _openai_bad_request("metadata: at most 16 pairs of strings (64, 512 chars)")
        batch = self._add("openai", lines[0]["body"]["model"], entries, "batch_")
        batch.input_file_id = body["input_file_id"]
        batch.metadata = dict(metadata)
        return await self._created(batch, self._openai_batch(batch, "validating"))

    async def _openai_list(self, request: web.Request) -> web.StreamResponse:
        size = self._page_size("openai", request.query.get("limit"), 20, 100)
        listed = self._listed("openai", request.query.get("after"))
        if size is None or listed is None:
            return _openai_bad_request("limit must be 1 to 100 and after a batch's id")
        data = [batch.view for batch in listed[:size]]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(listed) > size,
            }
        )

    async def _openai_get(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "openai")
        refused = self._refused("openai")
        if refused is not None:
            return refused
        phase = self._advance(batch)
        if phase == "failed":
            body = self._openai_batch(batch, "failed")
            error = {"code": "invalid_request", "message": self.quirks["openai"].fail}
            return self._shown(batch, body | {"errors": {"object": "list", "data": [error]}})
        if phase == "open":
            status = "validating" if batch.polls == 1 else "in_progress"
        elif phase == "cancelling":
            status = "cancelling"
        else:
            status = batch.final
            self._openai_files(batch)
        return self._shown(batch, self._openai_batch(batch, status))

    async def _openai_cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "openai")
        self._cancel(batch)
        status = "cancelling" if batch.outcomes is None else batch.final
        return self._shown(batch, self._openai_batch(batch, status))

    def _openai_files(self, batch: FakeBatch) -> None:
        """Writes the output and error files once the late-files polls have passed."""
        assert batch.outcomes is not None and batch.ended_at_poll is not None
        if batch.polls - batch.ended_at_poll < self.quirks["openai"].late_files_polls:
            return
        if batch.output_file_id is not None or batch.error_file_id is not None:
            return
        output, errors = [], []
        for n, (custom_id, outcome) in enumerate(batch.outcomes.items()):
            line: dict[str, Any] = {"id": f"batch_req_{n}", "custom_id": custom_id}
            if isinstance(outcome, Answer):
                body = ANSWER_BODIES["openai"](outcome, batch.model)
                line |= {"response": {"status_code": 200, "request_id": f"req_{n}", "body": body}}
                output.append(line | {"error": None})
            elif isinstance(outcome, HttpError):
                error = {"message": outcome.message, "type": "fake_error", "code": None}
                response = {"status_code": outcome.status, "request_id": f"req_{n}"}
                errors.append(line | {"response": response | {"body": {"error": error}}})
            else:
                code, message = _OPENAI_NOT_RUN[str(outcome)]
                errors.append(
                    line | {"response": None, "error": {"code": code, "message": message}}
                )
        for lines, attribute in ((output, "output_file_id"), (errors, "error_file_id")):
            if lines:
                file_id = self._new_id("file-")
                content = "".join(json.dumps(line) + "\n" for line in lines).encode()
                self.files[file_id] = ("batch_output", content)
                setattr(batch, attribute, file_id)

    def _openai_batch(self, batch: FakeBatch, status: str) -> dict[str, Any]:
        counts = self._counts(batch)
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at),
            "metadata": batch.metadata or None,
            "model": batch.model,
            "request_counts": {
                "total": len(batch.entries),
                "completed": counts["answered"],
                "failed": counts["errored"] + counts["expired"] + counts["cancelled"],
            },
        }

    # -- anthropic ------------------------------------------------------------------------------

    async def _anthropic_create(self, request: web.Request) -> web.StreamResponse:
        quirks = self.quirks["anthropic"]
        if quirks.refused_creates > 0:
            quirks.refused_creates -= 1
            quirks.creates_refused += 1
            status = quirks.refused_status
            message = "overloaded, try again" if status == 503 else "internal server error"
            error = HttpError(status, message=message)
            return web.json_response(ERROR_BODIES["anthropic"](error), status=status)
        body = await request.json()
        requests = body.get("requests") or []
        ids = [r.get("custom_id", "") for r in requests]
        problem = self._too_many("anthropic", len(requests))
        if not requests:
            problem = "requests: at least one is required"
        elif len(set(ids)) != len(ids):
            problem = "custom_id must be unique within a batch"
        if problem:
            error = {"type": "invalid_request_error", "message": problem}
            return web.json_response({"type": "error", "error": error}, status=400)
        entries = [
            (
                r["custom_id"],
                Recorded("anthropic", "/v1/messages", dict(request.headers), r["params"], 0.0),
            )
            for r in requests
        ]
        batch = self._add("anthropic", requests[0]["params"]["model"], entries, "msgbatch_")
        return await self._created(batch, self._anthropic_batch(batch, "in_progress"))

    async def _anthropic_list(self, request: web.Request) -> web.StreamResponse:
        after, before = request.query.get("after_id"), request.query.get("before_id")
        size = self._page_size("anthropic", request.query.get("limit"), 20, 1000)
        listed = self._newest_first("anthropic")
        ids = [batch.id for batch in listed]
        if size is None or (after and before) or any(c not in ids for c in (after, before) if c):
            error = {"type": "invalid_request_error", "message": "bad limit, after_id, before_id"}
            return web.json_response({"type": "error", "error": error}, status=400)
        if before:  # the page just before the cursor (newer batches)
            end = ids.index(before)
            page, has_more = listed[max(0, end - size) : end], end > size
        else:
            start = ids.index(after) + 1 if after else 0
            page, has_more = listed[start : start + size], len(listed) > start + size
        return web.json_response(
            {
                "data": [batch.view for batch in page],
                "has_more": has_more,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
            }
        )

    async def _anthropic_get(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "anthropic")
        refused = self._refused("anthropic")
        if refused is not None:
            return refused
        phase = self._advance(batch)
        status = {"open": "in_progress", "cancelling": "canceling"}.get(phase, "ended")
        return self._shown(batch, self._anthropic_batch(batch, status))

    async def _anthropic_cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "anthropic")
        self._cancel(batch)
        status = "canceling" if batch.outcomes is None else "ended"
        return self._shown(batch, self._anthropic_batch(batch, status))

    async def _anthropic_results(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "anthropic")
        if batch.outcomes is None:
            error = {"type": "invalid_request_error", "message": "the batch has not ended"}
            return web.json_response({"type": "error", "error": error}, status=400)
        lines = []
        for custom_id, outcome in batch.outcomes.items():
            result: dict[str, Any]
            if isinstance(outcome, Answer):
                message = ANSWER_BODIES["anthropic"](outcome, batch.model)
                result = {"type": "succeeded", "message": message}
            elif isinstance(outcome, HttpError):
                kind = _ANTHROPIC_ERROR_TYPES.get(outcome.status, "api_error")
                error = {"type": kind, "message": outcome.message}
                result = {"type": "errored", "error": {"type": "error", "error": error}}
            else:
                result = {"type": "canceled" if outcome == "cancelled" else "expired"}
            lines.append(json.dumps({"custom_id": custom_id, "result": result}) + "\n")
        return web.Response(body="".join(lines).encode(), content_type="application/binary")

    def _anthropic_batch(self, batch: FakeBatch, status: str) -> dict[str, Any]:
        counts = self._counts(batch)
        ended, created = status == "ended", batch.created_at
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": {
                # Zero until processing of the whole batch has ended, as the API documents.
                "processing": 0 if ended else len(batch.entries),
                "succeeded": counts["answered"],
                "errored": counts["errored"],
                "canceled": counts["cancelled"],
                "expired": counts["expired"],
            },
            "created_at": _iso(created),
            "expires_at": _iso(created + 86_400),
            "ended_at": _iso(created + 3_600) if ended else None,
            "cancel_initiated_at": _iso(created + 60) if batch.cancel_at_poll is not None else None,
            "archived_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

    # -- gemini ---------------------------------------------------------------------------------

    async def _gemini_create(self, request: web.Request) -> web.StreamResponse:
        model = request.match_info["model"]
        body = await request.json()
        batch_body = body.get("batch") or {}
        inlined = (((batch_body.get("inputConfig") or {}).get("requests")) or {}).get(
            "requests"
        ) or []
        problem = self._too_many("gemini", len(inlined))
        if not inlined:
            problem = "inputConfig.requests.requests is required"
        elif not batch_body.get("displayName"):
            problem = "batch.displayName is required"
        if problem:
            error = {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}
            return web.json_response({"error": error}, status=400)
        path = f"/v1beta/models/{model}:generateContent"
        entries = [
            (
                str((item.get("metadata") or {}).get("key", "")),
                Recorded("gemini", path, dict(request.headers), item["request"], 0.0),
            )
            for item in inlined
        ]
        batch = self._add("gemini", model, entries, "fakebatch")
        batch.display_name = batch_body["displayName"]
        return await self._created(batch, self._gemini_operation(batch, "BATCH_STATE_PENDING"))

    async def _gemini_list(self, request: web.Request) -> web.StreamResponse:
        size = self._page_size("gemini", request.query.get("pageSize"), 20, 1000)
        listed = self._listed("gemini", request.query.get("pageToken"))
        if size is None or listed is None:
            error = {
                "code": 400,
                "message": "bad pageSize or pageToken",
                "status": "INVALID_ARGUMENT",
            }
            return web.json_response({"error": error}, status=400)
        page = listed[:size]
        # Empty fields are left out, as proto3 JSON leaves them; the token is opaque to callers.
        body: dict[str, Any] = {}
        if page:
            body["operations"] = [batch.view for batch in page]
        if len(listed) > size:
            body["nextPageToken"] = page[-1].id
        return web.json_response(body)

    async def _gemini_get(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, "gemini")
        refused = self._refused("gemini")
        if refused is not None:
            return refused
        phase = self._advance(batch)
        if phase == "failed":
            operation = self._gemini_operation(batch, "BATCH_STATE_FAILED")
            error = {"code": 400, "message": self.quirks["gemini"].fail}
            return self._shown(batch, operation | {"done": True, "error": error})
        if phase != "ended":
            state = "BATCH_STATE_PENDING" if batch.polls == 1 else "BATCH_STATE_RUNNING"
        else:
            state = f"BATCH_STATE_{batch.final.upper()}".replace("COMPLETED", "SUCCEEDED")
        return self._shown(batch, self._gemini_operation(batch, state))

    async def _gemini_cancel(self, request: web.Request) -> web.StreamResponse:
        self._cancel(self._batch(request, "gemini"))
        return web.json_response({})

    def _gemini_operation(self, batch: FakeBatch, state: str) -> dict[str, Any]:
        counts = self._counts(batch)
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{batch.model}",
            "displayName": batch.display_name,
            "createTime": _iso(batch.created_at),
            "updateTime": _iso(batch.created_at + 60),
            "batchStats": {
                "requestCount": str(len(batch.entries)),
                "successfulRequestCount": str(counts["answered"]),
                "failedRequestCount": str(counts["errored"]),
                "pendingRequestCount": str(0 if batch.outcomes else len(batch.entries)),
            },
            "state": state,
            "name": f"batches/{batch.id}",
        }
        done = batch.outcomes is not None
        if done:
            responses = []
            for custom_id, outcome in (batch.outcomes or {}).items():
                item: dict[str, Any] = {"metadata": {"key": custom_id}}
                if isinstance(outcome, Answer):
                    responses.append(
                        item | {"response": ANSWER_BODIES["gemini"](outcome, batch.model)}
                    )
                elif isinstance(outcome, HttpError):
                    error = {"code": outcome.status, "message": outcome.message}
                    responses.append(item | {"error": error})
            if responses:
                metadata["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
        return {"name": f"batches/{batch.id}", "metadata": metadata, "done": done}


_OPENAI_NOT_RUN = {
    "expired": (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
    "cancelled": (
        "batch_cancelled",
        "This request was not executed because the batch was cancelled.",
    ),
}


def _openai_input_problem(lines: list[dict[str, Any]], endpoint: object) -> str | None:
    """What OpenAI's validation refuses in an input file, or None."""
    if endpoint != "/v1/chat/completions":
        return "endpoint must be /v1/chat/completions here"
    if not lines:
        return "the input file holds no requests"
    ids = [line.get("custom_id") for line in lines]
    if len(set(ids)) != len(ids):
        return "custom_id must be unique within a batch"
    if any(line.get("method") != "POST" or line.get("url") != endpoint for line in lines):
        return "every line must POST to the batch's endpoint"
    if len({line["body"].get("model") for line in lines}) != 1:
        return "every request of a batch must use the same model"
    return None


def _openai_bad_request(message: str) -> web.StreamResponse:
    error = {"message": message, "type": "invalid_request_error", "code": None}
    return web.json_response({"error": error}, status=400)


def _openai_metadata_ok(metadata: object) -> bool:
    """OpenAI's metadata rule: up to 16 pairs, keys up to 64 characters, values up to 512."""
    return (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in metadata.items()
        )
    )


def _openai_file(
    file_id: str, filename: str, content: bytes, purpose: str, created_at: float
) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(created_at),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
    }


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace("+00:00", "Z")


# Priced models of each vendor, so that a test can compare bills.
BATCH_MODELS = {
    "openai": "gpt-4.1-mini",
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
}
# Batch mode fast enough for a test: a wave closes 0.2 s after its last call, batches are
# polled every few hundredths of a second.
FAST_BATCHES = {
    "gather_s": 0.2,
    "max_gather_s": 5.0,
    "first_poll_s": 0.02,
    "max_poll_s": 0.1,
    "poll_lease_s": 5.0,
    "submit_grace_s": 1.0,
}


def judges_config(fake: FakeLLMServer, path: Path, **batches: Any) -> Path:
    """A judges config file with every provider at `fake` and FAST_BATCHES (`batches` over
    them), for a server started in or out of the test's process."""
    config = {"providers": provider_settings(fake), "batches": {**FAST_BATCHES, **batches}}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path
