"""StudyService over grpc.aio: a study's creation, inputs, start, state, report and labels.

Every RPC acts on the caller's tenant's studies only; another tenant's study is NOT_FOUND,
exactly like one that does not exist. The work itself (each query's job, the budget, the final
report) is the study driver's (server/studies/driver.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Protocol

import anyio
import anyio.to_thread
import grpc

from tierank.evaluation import format_qrels
from tierank.limits import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_QRELS_PAGE_QUERIES,
    DEFAULT_STUDY_DEPTH,
    DEFAULT_STUDY_QUERIES_PAGE_SIZE,
    MAX_QRELS_PAGE_QUERIES,
    MAX_STUDIES_PAGE_SIZE,
    MAX_STUDY_QUERIES_PAGE_SIZE,
)
from tierank.resources import FINAL_STUDY_STATES, STUDY_DRAFT, STUDY_RUNNING
from tierank.server import metrics
from tierank.server.errors import (
    FieldViolation,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    shown,
)
from tierank.server.jobs.manager import JobManager
from tierank.server.names import BadName, new_sortable_id, parse_study_name, study_name
from tierank.server.observability.studies import StudyTelemetry
from tierank.server.observability.tracing import current_trace_context
from tierank.server.rpc import page_tokens
from tierank.server.rpc.auth import current_caller
from tierank.server.rpc.interceptor import request_bytes
from tierank.server.rpc.study_requests import (
    resolve_labels,
    validate_extension,
    validate_study_spec,
)
from tierank.server.rpc.validation import validate_request_id
from tierank.server.storage.base import (
    ChunkAdded,
    ProviderBatchJournal,
    ProviderBatchRecord,
    StudyChunk,
    StudyRecord,
    TenantStore,
    WatcherStore,
)
from tierank.server.studies.driver import DriverStore, StudyDriver, query_job_spec
from tierank.server.studies.extension import plan_extension, pooled_systems
from tierank.server.studies.grading import StudyGrading
from tierank.server.studies.inputs import (
    chunk_violations,
    counter,
    later_chunk_violations,
    with_round,
)
from tierank.server.studies.labels import Labeller, judged_orders, reported_qrels
from tierank.server.studies.pools import plan_queries
from tierank.server.studies.progress import every_query, initial_progress
from tierank.server.studies.report import (
    ReportStore,
    build_report,
    export_labeller,
    sample_violations,
)
from tierank.server.studies.scratch import open_scratch
from tierank.server.tenancy.quotas import WatcherSlots, limits_of
from tierank.server.wire.studies import study_view
from tierank.v1 import rank_pb2, study_pb2, study_pb2_grpc

STUDY_SERVICE = study_pb2.DESCRIPTOR.services_by_name["StudyService"].full_name
# How often WatchStudy looks at the study (its progress changes as queries end).
_WATCH_POLL_S = 0.5
# How long CancelStudy waits for the study's jobs to stop before answering.
_CANCEL_WAIT_S = 30.0
_NO_FILTER = 0


class StudyServiceStore(
    DriverStore, ReportStore, TenantStore, WatcherStore, ProviderBatchJournal, Protocol
):
    """Studies, their jobs, the tenants' limits and watch slots, the studies' provider
    batches."""


class StudyServicer(study_pb2_grpc.StudyServiceServicer):
    def __init__(
        self,
        storage: StudyServiceStore,
        manager: JobManager,
        driver: StudyDriver,
        grading: StudyGrading,
        replica: str,
    ) -> None:
        self._storage = storage
        self._manager = manager
        self._grading = grading
        self._driver = driver
        self._watchers = WatcherSlots(storage, replica)

    async def _record(self, name: str, field: str = "name") -> StudyRecord:
        try:
            study_id = parse_study_name(name)
        except BadName as bad:
            raise InvalidInput([FieldViolation(field, str(bad))]) from None
        record = await self._storage.get_study(current_caller().tenant, study_id)
        if record is None:
            raise NotFound(name, "tierank.v1.Study")
        return record

    async def CreateStudy(
        self, request: study_pb2.CreateStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        spec = study_pb2.StudySpec()
        spec.CopyFrom(request.spec)
        resolve_labels(spec, self._grading.grades)
        violations = validate_study_spec(spec, self._manager.knows_provider, self._grading.grades)
        violations += validate_request_id(request.request_id)
        if violations:
            raise InvalidInput(violations)
        if not spec.depth:
            spec.depth = DEFAULT_STUDY_DEPTH
        tenant = current_caller().tenant
        now = time.time()
        record = StudyRecord(
            study_id=new_sortable_id(),
            tenant=tenant,
            request_id=request.request_id,
            state=STUDY_DRAFT,
            spec=spec.SerializeToString(deterministic=True),
            create_time=now,
            update_time=now,
            inputs=study_pb2.StudyInputs().SerializeToString(),
            progress=study_pb2.StudyProgress().SerializeToString(),
            # This call's trace is the study's: its rounds and jobs continue it.
            trace_context=current_trace_context(),
        )
        stored = await self._storage.create_study(record)
        if stored.study_id != record.study_id and stored.spec != record.spec:
            raise InvalidInput(
                [
                    FieldViolation(
                        "request_id",
                        f"was used for {study_name(stored.study_id)} with a different spec",
                    )
                ]
            )
        return study_view(stored)

    async def AddStudyInputs(
        self, request: study_pb2.AddStudyInputsRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.AddStudyInputsResponse:
        try:
            study_id = parse_study_name(request.study)
        except BadName as bad:
            raise InvalidInput([FieldViolation("study", str(bad))]) from None
        # A chunk may hold millions of ids, each checked in Python: in a worker thread, so that
        # the event loop goes on serving other calls (the interpreter's lock changes hands every
        # few milliseconds), where it was held for seconds.
        violations = await anyio.to_thread.run_sync(chunk_violations, request)
        if violations:
            raise InvalidInput(violations)
        tenant = current_caller().tenant
        # Stored as sent: serializing it again would hold the loop in one piece as long as
        # parsing it did.
        chunk = StudyChunk(request.request_id, request_bytes())
        added = await self._storage.add_study_chunk(tenant, study_id, chunk, counter(request))
        if added is ChunkAdded.NO_STUDY:
            raise NotFound(request.study, "tierank.v1.Study")
        record = await self._record(request.study, "study")
        if added is ChunkAdded.REFUSED:
            counts = study_pb2.StudyInputs.FromString(record.inputs)
            raise InvalidInput(later_chunk_violations(request, counts))
        if added is ChunkAdded.CLOSED and record.state == STUDY_RUNNING:
            raise PreconditionFailed(
                f"{request.study} is running: it takes inputs again (runs to add) once it "
                "has ended",
                "STUDY_RUNNING",
            )
        if added is ChunkAdded.CLOSED:
            raise PreconditionFailed(
                f"{request.study} was cancelled before it started: it takes no more inputs",
                "STUDY_NOT_DRAFT",
            )
        return study_pb2.AddStudyInputsResponse(
            study=study_view(record), added=added is ChunkAdded.ADDED
        )

    async def StartStudy(
        self, request: study_pb2.StartStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        record = await self._record(request.name)
        if record.state != STUDY_DRAFT:
            return study_view(record)
        if record.cancel_requested:
            return await self._cancel_draft(record)
        spec = study_pb2.StudySpec.FromString(record.spec)
        async with open_scratch(self._storage, record.study_id) as scratch:
            # Pooling is in the study's trace, with the rounds it makes.
            with StudyTelemetry(record).part("tierank.study.start", {"tierank.study.round": 0}):
                depth = spec.depth or DEFAULT_STUDY_DEPTH
                pooled, violations = await anyio.to_thread.run_sync(plan_queries, scratch, depth)
                if pooled is not None:
                    queries = {row.query_id for row in scratch.pool_rows()}
                    violations += await anyio.to_thread.run_sync(
                        sample_violations, scratch, queries
                    )
                if violations:
                    raise InvalidInput(violations)
                assert pooled is not None  # no violation
                await self._check_judges(spec, scratch.first_pool(), record.tenant)
                progress = initial_progress(pooled.queries, pooled.documents).SerializeToString()
                first_round = study_pb2.StudyRound(
                    round=0,
                    systems=sorted(scratch.systems()),
                    queries_extended=pooled.queries,
                    documents_added=pooled.documents,
                )
                first_round.start_time.GetCurrentTime()
                started = await self._storage.start_study(
                    record.study_id, scratch.pools(), progress, with_round(first_round)
                )
        if not started:
            # Started by another call meanwhile, or cancelled: a cancelled draft ends here.
            record = await self._record(request.name)
            if record.state == STUDY_DRAFT and record.cancel_requested:
                return await self._cancel_draft(record)
            return study_view(record)
        self._driver.nudge(record.study_id)
        return study_view(await self._record(request.name))

    async def _check_judges(self, spec: study_pb2.StudySpec, pool: bytes, tenant: str) -> None:
        """The judges as a query's job will have them (keys, qualifications, what a judge
        needs of a pool) and the grader of its labels, so that a study that cannot judge fails
        here, not per query."""
        if spec.labels.WhichOneof("mapping") == "pointwise":
            await self._grading.grader(tenant, spec)
        first = query_job_spec(spec, pool, rank_pb2.JobSpec())
        try:
            await self._manager.check_judges(first, tenant)
        except InvalidInput as invalid:
            raise InvalidInput(
                [
                    FieldViolation(v.field.replace("spec.", "spec.ranking.", 1), v.rule)
                    for v in invalid.violations
                ]
            ) from None

    async def ExtendStudy(
        self, request: study_pb2.ExtendStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        record = await self._record(request.name)
        violations = validate_extension(request)
        if violations:
            raise InvalidInput(violations)
        counts = study_pb2.StudyInputs.FromString(record.inputs)
        if request.request_id and any(r.request_id == request.request_id for r in counts.rounds):
            return study_view(record)
        if record.state == STUDY_DRAFT or not record.start_time:
            state = "a draft" if record.state == STUDY_DRAFT else "cancelled before it started"
            raise PreconditionFailed(
                f"{request.name} is {state}: only a study that has run is extended (StartStudy "
                "pools every run a draft has)",
                "STUDY_NOT_STARTED",
            )
        if record.state not in FINAL_STUDY_STATES:
            raise _round_running(request.name, counts)
        pooled = pooled_systems(counts)
        added = sorted(set(counts.systems) - pooled)
        violations = [
            FieldViolation(
                f"systems[{i}]",
                f"{system!r} is pooled already"
                if system in pooled
                else f"no run of {system!r} was added (AddStudyInputs)",
            )
            for i, system in enumerate(request.systems)
            if system not in added
        ]
        if violations:
            raise InvalidInput(violations)
        if not added:
            raise PreconditionFailed(
                f"no run was added to {request.name} since it last ran: add one "
                "(AddStudyInputs) first",
                "NO_ADDED_RUN",
            )
        chosen = list(request.systems) or added
        spec = study_pb2.StudySpec.FromString(record.spec)
        rows = await every_query(self._storage, record.study_id)
        depth = spec.depth or DEFAULT_STUDY_DEPTH
        now = time.time()
        async with open_scratch(self._storage, record.study_id, pooled | set(chosen)) as scratch:
            extending = {"tierank.study.round": len(counts.rounds)}
            with StudyTelemetry(record).part("tierank.study.extend", extending):
                planned, violations = await anyio.to_thread.run_sync(
                    plan_extension, scratch, pooled, chosen, rows, depth, now
                )
                if violations:
                    raise InvalidInput(violations)
                assert planned is not None  # no violation
                if planned.round.queries_extended:
                    await self._check_judges(spec, scratch.first_pool(), record.tenant)
                progress = study_pb2.StudyProgress.FromString(record.progress)
                _extend_limits(spec, request, progress, elapsed=now - record.start_time)
                study_round = planned.round
                study_round.round = len(counts.rounds)
                study_round.request_id = request.request_id
                extended_now = await self._storage.extend_study(
                    record.study_id,
                    spec.SerializeToString(deterministic=True),
                    scratch.pools(),
                    planned.progress,
                    with_round(study_round),
                )
        if extended_now:
            self._driver.nudge(record.study_id)
            return study_view(await self._record(request.name))
        # Another call extended the study meanwhile (both found it ended): a retry of that same
        # call gets the study as it is; any other is told which round runs, rather than answered
        # as if that round were its own.
        record = await self._record(request.name)
        counts = study_pb2.StudyInputs.FromString(record.inputs)
        if request.request_id and any(r.request_id == request.request_id for r in counts.rounds):
            return study_view(record)
        raise _round_running(request.name, counts)

    async def GetStudy(
        self, request: study_pb2.GetStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        record = await self._record(request.name)
        return self._view(record, await self._batches(record))

    def _view(self, record: StudyRecord, batches: list[ProviderBatchRecord]) -> study_pb2.Study:
        """The study with its batches and, where this replica drives it, its pause."""
        return study_view(record, batches, self._driver.pause_of(record.study_id))

    async def _batches(self, record: StudyRecord) -> list[ProviderBatchRecord]:
        """The provider batches of the study's jobs' calls."""
        return await self._storage.owner_batches(record.tenant, study_name(record.study_id))

    async def ListStudies(
        self, request: study_pb2.ListStudiesRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.ListStudiesResponse:
        page_size = _page_size(request.page_size, DEFAULT_PAGE_SIZE, MAX_STUDIES_PAGE_SIZE)
        before = _continues(request.page_token, "ListStudies")
        records = await self._storage.list_studies(current_caller().tenant, page_size + 1, before)
        response = study_pb2.ListStudiesResponse(
            studies=[study_view(r) for r in records[:page_size]]
        )
        if len(records) > page_size:
            response.next_page_token = _token("ListStudies", records[page_size - 1].study_id)
        return response

    async def CancelStudy(
        self, request: study_pb2.CancelStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        record = await self._record(request.name)
        if record.state in FINAL_STUDY_STATES:
            return study_view(record)
        await self._storage.request_study_cancel(record.tenant, record.study_id)
        # Read again: a StartStudy may have started the draft before the cancel was marked
        # (none can after: a draft marked cancelled does not start).
        record = await self._record(request.name)
        if record.state == STUDY_DRAFT:
            return await self._cancel_draft(record)
        self._driver.nudge(record.study_id)
        with anyio.move_on_after(_CANCEL_WAIT_S):
            while record.state not in FINAL_STUDY_STATES:
                await anyio.sleep(0.1)
                record = await self._record(request.name)
        return study_view(record)

    async def _cancel_draft(self, record: StudyRecord) -> study_pb2.Study:
        # A draft has no driver: it ends here, with nothing judged.
        if await self._storage.finish_study(
            record.study_id, study_pb2.STUDY_STATE_CANCELLED, record.progress, b""
        ):
            metrics.study_ended(record.tenant, study_pb2.STUDY_STATE_CANCELLED)
        return study_view(await self._record(study_name(record.study_id)))

    async def WatchStudy(
        self, request: study_pb2.WatchStudyRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[study_pb2.Study]:
        record = await self._record(request.name)
        limits = await limits_of(self._storage, record.tenant)
        sent: tuple[int, bytes, list[study_pb2.ProviderBatch], study_pb2.StudyPause] | None = None
        async with self._watchers.hold(record.tenant, limits):
            while True:
                view = self._view(record, await self._batches(record))
                # A batch's poll that found nothing new changes no field shown.
                shown = (record.state, record.progress, list(view.provider_batches), view.pause)
                if shown != sent:
                    yield view
                    sent = shown
                if record.state in FINAL_STUDY_STATES:
                    return
                await anyio.sleep(_WATCH_POLL_S)
                record = await self._record(request.name)

    async def _report(self, record: StudyRecord) -> study_pb2.StudyReport:
        if record.state in FINAL_STUDY_STATES:
            stored = await self._storage.study_report(record.tenant, record.study_id)
            if stored:
                return study_pb2.StudyReport.FromString(stored)
        progress = study_pb2.StudyProgress.FromString(record.progress)
        return await build_report(self._storage, record, progress)

    async def GetStudyReport(
        self, request: study_pb2.GetStudyReportRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.StudyReport:
        report = await self._report(await self._record(request.name))
        report.ClearField("queries")
        report.ClearField("label_model")
        return report

    async def CalibrateStudy(
        self, request: study_pb2.CalibrateStudyRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.Study:
        record = await self._record(request.name)
        if record.state == STUDY_DRAFT or not record.start_time:
            raise PreconditionFailed(
                f"{request.name} has not run: a study is calibrated once it has labels "
                "(StartStudy takes a human sample sent with its inputs)",
                "STUDY_NOT_STARTED",
            )
        if record.state not in FINAL_STUDY_STATES:
            raise PreconditionFailed(
                f"{request.name} is running: calibrate it once it has ended", "STUDY_RUNNING"
            )
        counts = study_pb2.StudyInputs.FromString(record.inputs)
        if not counts.human_sample_judgments:
            raise InvalidInput(
                [
                    FieldViolation(
                        "human_sample",
                        f"{request.name} has no human sample: send one (AddStudyInputs"
                        " human_sample) first",
                    )
                ]
            )
        rows = await every_query(self._storage, record.study_id)
        async with open_scratch(self._storage, record.study_id) as scratch:
            violations = await anyio.to_thread.run_sync(
                sample_violations, scratch, {row.query_id for row in rows}
            )
        if violations:
            raise InvalidInput(violations)
        progress = study_pb2.StudyProgress.FromString(record.progress)
        report = await build_report(self._storage, record, progress)
        if not await self._storage.replace_study_report(
            record.tenant, record.study_id, report.SerializeToString()
        ):
            raise PreconditionFailed(
                f"{request.name} is running again: calibrate it once it has ended",
                "STUDY_RUNNING",
            )
        return study_view(await self._record(request.name))

    async def ListStudyQueries(
        self, request: study_pb2.ListStudyQueriesRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.ListStudyQueriesResponse:
        page_size = _page_size(
            request.page_size, DEFAULT_STUDY_QUERIES_PAGE_SIZE, MAX_STUDY_QUERIES_PAGE_SIZE
        )
        listing = f"ListStudyQueries {request.name}"
        after = _offset(request.page_token, listing)
        record = await self._record(request.name)
        if record.state in FINAL_STUDY_STATES:
            queries = list((await self._report(record)).queries)[after : after + page_size + 1]
        else:
            rows = await self._storage.study_queries(record.study_id, after, page_size + 1)
            queries = [
                study_pb2.StudyQuery.FromString(row.outcome)
                if row.outcome
                else study_pb2.StudyQuery(
                    query_id=row.query_id,
                    job=f"jobs/{row.job_id}" if row.job_id else "",
                    pool_size=row.pool_size,
                )
                for row in rows
            ]
        response = study_pb2.ListStudyQueriesResponse(queries=queries[:page_size])
        if len(queries) > page_size:
            response.next_page_token = _token(listing, str(after + page_size))
        return response

    async def ExportStudyQrels(
        self, request: study_pb2.ExportStudyQrelsRequest, context: grpc.aio.ServicerContext
    ) -> study_pb2.ExportStudyQrelsResponse:
        page_size = _page_size(
            request.page_size, DEFAULT_QRELS_PAGE_QUERIES, MAX_QRELS_PAGE_QUERIES
        )
        listing = f"ExportStudyQrels {request.name}"
        after = _offset(request.page_token, listing)
        record = await self._record(request.name)
        rows = await self._storage.study_queries(record.study_id, after, page_size + 1)
        page = rows[:page_size]
        labeller: Labeller = await export_labeller(self._storage, record)
        orders = await judged_orders(self._storage, record, page)
        labels = await anyio.to_thread.run_sync(labeller.label, orders)
        response = study_pb2.ExportStudyQrelsResponse(qrels=format_qrels(reported_qrels(labels)))
        if len(rows) > page_size:
            response.next_page_token = _token(listing, str(page[-1].position))
        return response


def _round_running(name: str, counts: study_pb2.StudyInputs) -> PreconditionFailed:
    """The refusal of an ExtendStudy while another round runs (or was started by another call
    while this one was planned), naming that round: the message says its number, request_id
    and systems, the ErrorInfo's metadata its `round` and `request_id` (when it has one)."""
    if not counts.rounds:  # a study stored before rounds were recorded
        return PreconditionFailed(
            f"{name} is running: extend it once it has ended", "STUDY_RUNNING"
        )
    running = counts.rounds[-1]
    if running.round == 0:
        started = "its first round (StartStudy)"
    else:
        started = f"round {running.round} (ExtendStudy"
        if running.request_id:
            started += f" request_id {shown(running.request_id)},"
        started += f" pooling {', '.join(running.systems) or 'no system'})"
    named = {"round": str(running.round)}
    if running.request_id:
        named["request_id"] = running.request_id
    return PreconditionFailed(
        f"{name} runs {started}, started by another call: extend it once that round has ended",
        "STUDY_RUNNING",
        **named,
    )


def _extend_limits(
    spec: study_pb2.StudySpec,
    request: study_pb2.ExtendStudyRequest,
    progress: study_pb2.StudyProgress,
    elapsed: float,
) -> None:
    """The study's limits for its next round, `elapsed` seconds after its start: its budget
    is what it has spent plus what the request allows more, in each limit the request sets;
    its deadline the request's from now, or none."""
    spec.deadline_seconds = elapsed + request.deadline_seconds if request.deadline_seconds else 0
    more, budget = request.budget, spec.budget
    if more.max_judge_calls:
        budget.max_judge_calls = progress.judge_calls + more.max_judge_calls
    if more.max_input_tokens:
        budget.max_input_tokens = progress.usage.input_tokens + more.max_input_tokens
    if more.max_cost_usd:
        budget.max_cost_usd = progress.usage.cost_usd + more.max_cost_usd


def _page_size(asked: int, default: int, most: int) -> int:
    if asked < 0:
        raise InvalidInput([FieldViolation("page_size", "must not be negative")])
    return min(asked or default, most)


def _token(listing: str, last: str) -> str:
    """A page token that continues `listing` (an RPC and the study it lists) after `last`."""
    return page_tokens.encode(f"{listing} {last}", _NO_FILTER)


def _continues(token: str, listing: str) -> str | None:
    """What the page token continues `listing` after (None: the first page); a token of
    another listing, or of another study's, is refused as a forged one is."""
    value = page_tokens.decode(token, _NO_FILTER)
    if value is None:
        return None
    made_for, _, last = value.rpartition(" ")
    if made_for != listing:
        raise InvalidInput(
            [FieldViolation("page_token", f"is not a page token of this {listing.split()[0]}")]
        )
    return last


def _offset(token: str, listing: str) -> int:
    """The position a page token of `listing` continues after; 0 for the first page."""
    last = _continues(token, listing)
    return 0 if last is None else int(last)  # signed: only this server made it
