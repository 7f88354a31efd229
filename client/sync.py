"""Blocking client for the tierank service: the same surface as `AsyncClient`, on a sync channel
(what both send is built in `_core`).

Like the async client it returns the generated `Job` / `JobEvent` messages as they are (see
`tierank.client.aio` for why) and raises `TierankError` for every failed call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from tierank.client import _core as core
from tierank.client._connection import Pem, channel_security, sync_channel
from tierank.client._core import ClientSettings, page_items, study_ended
from tierank.client._errors import (
    CONNECT_PROBE_METHOD,
    TierankError,
    cannot_reach,
    error_from_rpc,
    is_handshake_failure,
    not_answered,
)
from tierank.client._names import job_name
from tierank.client._operations import is_done, with_request_id
from tierank.client._resume import (
    CONNECT_CHECK_SECONDS,
    DEFAULT_RECONNECT_POLICY,
    Deadline,
    EventCursor,
    ReconnectHook,
    ReconnectPolicy,
    ended_cleanly,
    interrupted_stream_error,
)
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2, rank_pb2_grpc, study_pb2, study_pb2_grpc

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


class Client:
    """One channel to one server. Use as a context manager, or call `close()`.

    `api_key` is sent as `authorization: Bearer <key>` on every call. TLS is used with `tls=True`
    (gRPC's default trust roots), with `tls_ca` (trust this CA instead), or with a client
    certificate for mutual TLS (`tls_cert` and `tls_key` together). Each PEM option is the PEM
    bytes or a path (str or os.PathLike) read here. A missing, unreadable or wrong file, or a key
    that cannot be sent, raises `ConnectionSettingsError` (a ValueError) before anything is sent.
    """

    def __init__(
        self,
        target: str,
        *,
        api_key: str | None = None,
        tls: bool = False,
        tls_ca: Pem | None = None,
        tls_cert: Pem | None = None,
        tls_key: Pem | None = None,
        reconnect: ReconnectPolicy = DEFAULT_RECONNECT_POLICY,
        on_reconnect: ReconnectHook | None = None,
        channel_options: list[tuple[str, object]] | None = None,
    ) -> None:
        self.target = target
        self._channel = sync_channel(
            target,
            channel_security(
                api_key=api_key, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key
            ),
            channel_options,
        )
        self._stub = rank_pb2_grpc.RankServiceStub(self._channel)
        self._evals = eval_pb2_grpc.EvalServiceStub(self._channel)
        self._studies = study_pb2_grpc.StudyServiceStub(self._channel)
        self._settings = ClientSettings(target, reconnect, on_reconnect)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the channel connects; raises TierankError(UNAVAILABLE) on timeout, and at
        once when the TLS handshake fails, which waiting cannot mend."""
        ready = grpc.channel_ready_future(self._channel)
        deadline = Deadline(timeout)
        try:
            while True:
                try:
                    ready.result(timeout=deadline.slice(CONNECT_CHECK_SECONDS))
                    return
                except grpc.FutureTimeoutError:
                    pass
                failure = self._connect_failure()
                if failure is not None and is_handshake_failure(failure):
                    raise cannot_reach(self.target, failure)
                if timeout is not None and deadline.passed():
                    raise cannot_reach(self.target, not_answered(timeout, failure))
        finally:
            ready.cancel()

    def _connect_failure(self) -> TierankError | None:
        try:
            # No serializers: the probe sends and expects raw bytes.
            probe: grpc.UnaryUnaryMultiCallable[bytes, bytes]
            probe = self._channel.unary_unary(CONNECT_PROBE_METHOD)
            probe(b"", timeout=CONNECT_CHECK_SECONDS)
        except grpc.RpcError as rpc_error:
            return error_from_rpc(rpc_error)
        return None

    def create_job(
        self,
        spec: rank_pb2.JobSpec,
        *,
        request_id: str = "",
        full: bool = False,
        timeout: float | None = None,
    ) -> rank_pb2.Job:
        """Create a job. With a request_id, a retry returns the job the first call created.

        The job comes back without candidate texts and metadata unless `full` (AIP-157 views).
        """
        return self._unary(self._stub.CreateJob, core.create_job(spec, request_id, full), timeout)

    def get_job(
        self, name: str, *, full: bool = False, timeout: float | None = None
    ) -> rank_pb2.Job:
        """The job; its spec without candidate texts and metadata unless `full`."""
        return self._unary(self._stub.GetJob, core.get_job(name, full), timeout)

    def cancel_job(self, name: str, *, timeout: float | None = None) -> rank_pb2.Job:
        return self._unary(self._stub.CancelJob, core.cancel_job(name), timeout)

    def get_verdict(
        self, job: str, call_id: str, *, timeout: float | None = None
    ) -> rank_pb2.VerdictRecord:
        """One verdict with the exact prompt its judge saw and the raw answer (audit)."""
        return self._unary(self._stub.GetVerdict, core.get_verdict(job, call_id), timeout)

    def list_jobs(
        self,
        *,
        state: str | int | None = None,
        page_size: int = 0,
        full: bool = False,
        timeout: float | None = None,
    ) -> Iterator[rank_pb2.Job]:
        """Every job (optionally in one state), fetched a page at a time as you iterate.

        Jobs come without tiers and stats, and with their spec only if `full`. `timeout`
        applies to each page request.
        """
        request = core.list_jobs(state, page_size, full)
        return self._pages(self._stub.ListJobs, request, "jobs", timeout)

    def watch_job(
        self, name: str, after_sequence: int = 0, *, timeout: float | None = None
    ) -> Iterator[rank_pb2.JobEvent]:
        """Events with sequence > after_sequence, then live ones, until the terminal event.

        A connection lost mid-stream (UNAVAILABLE) is reopened from the last delivered sequence,
        so the caller sees every event exactly once. `timeout` bounds the whole stream.
        """
        cursor = EventCursor(job_name(name), after_sequence)
        return self._follow(cursor, Deadline(timeout), rank_request=None)

    def rank(
        self, spec: rank_pb2.JobSpec, *, request_id: str = "", timeout: float | None = None
    ) -> Iterator[rank_pb2.JobEvent]:
        """Create a job and stream its events from the first, with the same resume guarantee.

        Without a request_id one is generated, so that a retry after a lost connection can
        never create a second job.
        """
        request = core.rank(spec, request_id)
        return self._follow(EventCursor(), Deadline(timeout), rank_request=request)

    # -- operations: QualifyJudge and FillQrels, which run for minutes --------------------------

    def start_qualify_judge(
        self, request: eval_pb2.QualifyJudgeRequest, *, timeout: float | None = None
    ) -> eval_pb2.Operation:
        """Start qualifying a judge; returns the operation at once (watch it, or wait for it).
        Without a request_id one is generated, so that a retry never starts a second one."""
        return self._unary(self._evals.StartQualifyJudge, with_request_id(request), timeout)

    def start_fill_qrels(
        self, request: eval_pb2.FillQrelsRequest, *, timeout: float | None = None
    ) -> eval_pb2.Operation:
        """Start filling qrels holes; returns the operation at once, as start_qualify_judge."""
        return self._unary(self._evals.StartFillQrels, with_request_id(request), timeout)

    def get_operation(self, name: str, *, timeout: float | None = None) -> eval_pb2.Operation:
        return self._unary(self._evals.GetOperation, core.get_operation(name), timeout)

    def cancel_operation(self, name: str, *, timeout: float | None = None) -> eval_pb2.Operation:
        """Stop the operation and its judge calls; returns it once it has ended."""
        return self._unary(self._evals.CancelOperation, core.cancel_operation(name), timeout)

    def list_operations(
        self, *, page_size: int = 0, timeout: float | None = None
    ) -> Iterator[eval_pb2.Operation]:
        """Every operation of your tenant, newest first, without results (get_operation has
        them), a page at a time as you iterate."""
        request = core.list_operations(page_size)
        return self._pages(self._evals.ListOperations, request, "operations", timeout)

    def watch_operation(
        self, name: str, *, timeout: float | None = None
    ) -> Iterator[eval_pb2.Operation]:
        """The operation now and at each change of its progress or state, until it ends (the
        last one yielded has ended). A lost connection is reopened; `timeout` bounds the whole
        watch."""
        request = core.watch_operation(name)
        return self._watch(self._evals.WatchOperation, request, is_done, timeout)

    # -- studies: many queries, several systems' runs (study.proto) ----------------------------

    def create_study(
        self,
        spec: study_pb2.StudySpec,
        *,
        request_id: str = "",
        provider_batch: bool = False,
        timeout: float | None = None,
    ) -> study_pb2.Study:
        """Create a draft study; without a request_id one is generated, so that a retry never
        creates a second one. Send its inputs with `add_study_inputs`, then `start_study`.
        `provider_batch` (or the spec's own) sends every judge's calls to its provider's batch
        API: about half the price, answered within hours instead of seconds (openai,
        anthropic and gemini judges only; StudySpec.provider_batch)."""
        request = core.create_study(spec, request_id, provider_batch)
        return self._unary(self._studies.CreateStudy, request, timeout)

    def add_study_inputs(
        self,
        name: str,
        chunks: Iterable[study_pb2.AddStudyInputsRequest],
        *,
        timeout: float | None = None,
    ) -> study_pb2.Study:
        """Send input chunks (each with its own request_id: see tierank.client._study.chunks)
        one by one; a chunk sent before adds nothing. Returns the study after the last one."""
        study: study_pb2.Study | None = None
        for chunk in chunks:
            request = core.study_inputs(name, chunk)
            study = self._unary(self._studies.AddStudyInputs, request, timeout).study
        return study if study is not None else self.get_study(name, timeout=timeout)

    def start_study(self, name: str, *, timeout: float | None = None) -> study_pb2.Study:
        return self._unary(self._studies.StartStudy, core.start_study(name), timeout)

    def extend_study(
        self,
        name: str,
        *,
        systems: Sequence[str] = (),
        request_id: str = "",
        budget: rank_pb2.Budget | None = None,
        deadline_seconds: float = 0.0,
        timeout: float | None = None,
    ) -> study_pb2.Study:
        """Judge what the runs added to the ended study since it last ran add to its pools
        (send them first with `add_study_inputs`): those of `systems`, or of every system
        added; `budget`: at most this much more spent."""
        request = core.extend_study(name, systems, request_id, budget, deadline_seconds)
        return self._unary(self._studies.ExtendStudy, request, timeout)

    def get_study(self, name: str, *, timeout: float | None = None) -> study_pb2.Study:
        return self._unary(self._studies.GetStudy, core.get_study(name), timeout)

    def list_studies(self, *, timeout: float | None = None) -> Iterator[study_pb2.Study]:
        """Every study of the caller's tenant, newest first, a page at a time."""
        request = core.list_studies()
        return self._pages(self._studies.ListStudies, request, "studies", timeout)

    def cancel_study(self, name: str, *, timeout: float | None = None) -> study_pb2.Study:
        return self._unary(self._studies.CancelStudy, core.cancel_study(name), timeout)

    def watch_study(self, name: str, *, timeout: float | None = None) -> Iterator[study_pb2.Study]:
        """The study now and at each change of its progress or state, until it ends. A lost
        connection is reopened; `timeout` bounds the whole watch."""
        request = core.watch_study(name)
        return self._watch(self._studies.WatchStudy, request, study_ended, timeout)

    def get_study_report(self, name: str, *, timeout: float | None = None) -> study_pb2.StudyReport:
        return self._unary(self._studies.GetStudyReport, core.get_study_report(name), timeout)

    def calibrate_study(self, name: str, *, timeout: float | None = None) -> study_pb2.Study:
        """Apply the human sample sent to the ended study (`add_study_inputs` with
        human_sample) to its labels and report, judging nothing again."""
        return self._unary(self._studies.CalibrateStudy, core.calibrate_study(name), timeout)

    def list_study_queries(
        self, name: str, *, timeout: float | None = None
    ) -> Iterator[study_pb2.StudyQuery]:
        """Every query of the study, in topic order, a page at a time."""
        request = core.list_study_queries(name)
        return self._pages(self._studies.ListStudyQueries, request, "queries", timeout)

    def export_study_qrels(self, name: str, *, timeout: float | None = None) -> str:
        """The labels of the study's tiers as TREC qrels text."""
        request = core.export_study_qrels(name)
        pages = self._pages(self._studies.ExportStudyQrels, request, "qrels", timeout)
        return "".join(pages)

    # -- the I/O --------------------------------------------------------------------------------

    def _unary(
        self,
        method: grpc.UnaryUnaryMultiCallable[_Request, _Response],
        request: _Request,
        timeout: float | None,
    ) -> _Response:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as rpc_error:
            raise error_from_rpc(rpc_error, self.target) from None

    def _pages(
        self,
        method: grpc.UnaryUnaryMultiCallable[Any, Any],
        request: Any,
        field: str,
        timeout: float | None,
    ) -> Iterator[Any]:
        """Each item of each page's `field` (a single field's value: each page's), a page at a
        time; `timeout` applies to each page."""
        while True:
            page = self._unary(method, request, timeout)
            yield from page_items(page, field)
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def _watch(
        self,
        method: grpc.UnaryStreamMultiCallable[Any, _Response],
        request: Any,
        ended: Callable[[_Response], bool],
        timeout: float | None,
    ) -> Iterator[_Response]:
        """A resource as the stream sends it, until `ended`; reopened when the connection is
        lost, within `timeout` in all."""
        deadline = Deadline(timeout)
        attempts = self._settings.attempts()
        while True:
            call = method(request, timeout=deadline.remaining())
            try:
                for resource in call:
                    attempts.progressed()
                    yield resource
                    if ended(resource):
                        return
                attempts.answered()
                error = interrupted_stream_error()
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
            finally:
                call.cancel()
            time.sleep(attempts.next_delay(error, deadline))

    def _follow(
        self,
        cursor: EventCursor,
        deadline: Deadline,
        rank_request: rank_pb2.RankRequest | None,
    ) -> Iterator[rank_pb2.JobEvent]:
        attempts = self._settings.attempts()
        while not cursor.finished:
            # Until the job's name is known (Rank before its first event) only Rank can resume.
            if cursor.job:
                request = rank_pb2.WatchJobRequest(
                    name=cursor.job, after_sequence=cursor.last_sequence
                )
                call = self._stub.WatchJob(request, timeout=deadline.remaining())
            else:
                assert rank_request is not None, "a watch starts from the job's name"
                call = self._stub.Rank(rank_request, timeout=deadline.remaining())
            try:
                for event in call:
                    if cursor.accept(event):
                        attempts.progressed()
                        yield event
                attempts.answered()
                if cursor.finished or (
                    cursor.job and ended_cleanly(self.get_job(cursor.job), cursor)
                ):
                    return
                error = interrupted_stream_error()
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
            finally:
                call.cancel()
            time.sleep(attempts.next_delay(error, deadline))
