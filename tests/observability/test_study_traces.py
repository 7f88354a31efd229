"""A study is one trace, through real server processes and a real OTLP/gRPC endpoint on loopback
(tests/observability/collector.py): its CreateStudy call, its pooling, the driver's runs of each
round, and every query's job runs; a kill -9 and a restart mid-study, and an extension later,
go on in that trace; no topic, passage or rubric is in any span with content capture off; the
log lines and `tierank study show` / `list` name the trace."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_process import tierank
from collector import ReceivedSpan, TraceCollector, named
from study_calls import Stubs, started_study, study_id, study_jobs, until_final, until_study
from study_data import collection, inputs_request, oracle_ranking, run_request, without

from tierank.client import LocalServer
from tierank.v1 import study_pb2

CALLER_TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "10f067aa0ba902b7"
TRACEPARENT = (("traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"),)
CREATE_STUDY = "tierank.v1.StudyService/CreateStudy"
RUBRIC = "a passage is relevant when it answers the topic's question in full"
QUERIES = 6
# Spans leave a server every 50 ms, so that a server killed mid-study has sent what had ended.
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}


def _spec() -> study_pb2.StudySpec:
    # Judges slow enough that the kill falls while queries are live and others have ended.
    ranking = oracle_ranking(
        noise=0.5, latency_ms=100, top_k=3, batch_size=4, max_in_flight=2, rubric=RUBRIC
    )
    return study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=2)


def _mid_study(study: study_pb2.Study) -> bool:
    progress = study.progress
    return progress.settled + progress.provisional >= 2 and progress.running >= 1


def _of_study(spans: list[ReceivedSpan], name: str, study: str) -> list[ReceivedSpan]:
    return [s for s in named(spans, name) if s.attributes.get("tierank.study.id") == study]


def _runs_of(spans: list[ReceivedSpan], job_ids: set[str]) -> list[ReceivedSpan]:
    return [
        s for s in named(spans, "tierank.job.run") if s.attributes.get("tierank.job.id") in job_ids
    ]


def _replica(span: ReceivedSpan) -> object:
    return span.resource["service.instance.id"]


async def test_a_study_is_one_trace_across_a_kill_9_a_restart_and_its_extension(tmp_path: Path):
    data = collection(queries=QUERIES)
    first_runs = without(data, "poor")
    with TraceCollector() as collector:
        env = {**FAST_EXPORT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint}
        first = LocalServer(db=tmp_path / "tierank.db", env=env)
        second = LocalServer(db=tmp_path / "tierank.db", env=env)
        try:
            address = await anyio.to_thread.run_sync(first.start)
            async with grpc.aio.insecure_channel(address) as channel:
                stubs = Stubs.on(channel, metadata=TRACEPARENT)
                study = await started_study(stubs, _spec(), inputs_request("", first_runs))
                await until_study(stubs, study.name, _mid_study, timeout=30, poll_s=0.02)
                before_kill = {
                    job.name.rsplit("/", 1)[1] for job in await study_jobs(stubs, study.name)
                }
            assert first.pid is not None
            os.kill(first.pid, signal.SIGKILL)

            address = await anyio.to_thread.run_sync(second.start)
            async with grpc.aio.insecure_channel(address) as channel:
                stubs = Stubs.on(channel)  # no traceparent from here on: the study has its trace
                ended = await until_final(stubs, study.name, timeout=30)
                first_jobs = {
                    job.name.rsplit("/", 1)[1] for job in await study_jobs(stubs, study.name)
                }
                # A run added later, its round pooled and judged in the same trace.
                await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
                await stubs.studies.ExtendStudy(study_pb2.ExtendStudyRequest(name=study.name))
                extended = await until_final(stubs, study.name, timeout=30)
                jobs = {job.name.rsplit("/", 1)[1] for job in await study_jobs(stubs, study.name)}
            shown = tierank("study", "show", study.name, "--server", address)
            listed = tierank("study", "list", "--server", address)
            sid = study_id(study.name)
            spans = collector.wait_for(
                lambda spans: (
                    len(_of_study(spans, "tierank.study.end", sid)) == 2
                    and {s.attributes["tierank.job.id"] for s in _runs_of(spans, jobs)}
                    >= jobs - before_kill
                )
            )
            log = second.log_tail(2000)
        finally:
            first.stop()
            second.stop()

    assert ended.state == extended.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert extended.trace_id == CALLER_TRACE
    assert jobs - first_jobs, "the extension judged some query again"
    # The CreateStudy call is in the caller's trace, a child of the caller's span.
    (create,) = named(spans, CREATE_STUDY)
    assert (create.trace_id, create.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    in_trace = [s for s in spans if s.trace_id == CALLER_TRACE]
    # Pooling each round is a span under the CreateStudy call: StartStudy's (in the caller's
    # trace too) and ExtendStudy's (a call in a trace of its own, linked).
    (start,) = _of_study(spans, "tierank.study.start", sid)
    (extend,) = _of_study(spans, "tierank.study.extend", sid)
    assert (start.trace_id, start.parent_id) == (extend.trace_id, extend.parent_id)
    assert (start.trace_id, start.parent_id) == (CALLER_TRACE, create.span_id)
    (extend_call,) = named(spans, "tierank.v1.StudyService/ExtendStudy")
    assert extend_call.trace_id != CALLER_TRACE
    assert [link.span_id.hex() for link in extend.span.links] == [extend_call.span_id]
    assert extend.attributes["tierank.study.round"] == 1
    # The killed server's run of round 0 never ended (nor was sent); the restarted server's
    # run of it and the run of round 1 are under the CreateStudy call, on the second server.
    runs = _of_study(spans, "tierank.study.run", sid)
    assert sorted(r.attributes["tierank.study.round"] for r in runs) == [0, 1]
    assert {(r.trace_id, r.parent_id) for r in runs} == {(CALLER_TRACE, create.span_id)}
    assert _replica(create) != _replica(runs[0]) == _replica(runs[1])
    ends = _of_study(spans, "tierank.study.end", sid)
    assert {e.parent_id for e in ends} == {r.span_id for r in runs}
    assert {e.attributes["tierank.study.state"] for e in ends} == {"STUDY_STATE_SUCCEEDED"}
    # Every query's job runs in the study's trace: those created after the restart (the rest of
    # round 0, and round 1) under the run that created them; those before, under the killed
    # server's run, resumed on the second server in the same trace.
    job_runs = _runs_of(spans, jobs)
    assert {run.trace_id for run in job_runs} == {CALLER_TRACE}
    run_ids = {r.span_id for r in runs}
    assert {r.parent_id for r in _runs_of(spans, jobs - before_kill)} <= run_ids
    assert {r.parent_id for r in _runs_of(spans, before_kill)}.isdisjoint(run_ids)
    # Both servers' work is in it: waves the killed one ran, runs the second one ran.
    assert {_replica(s) for s in in_trace} == {_replica(create), _replica(runs[0])}
    # Content capture is off: no topic, passage or rubric in anything exported.
    exported = b"".join(collector.raw)
    for text in (RUBRIC, *data.topics.values(), *data.passages.values()):
        assert text.encode() not in exported, text
    # The study's trace is shown; every line the driver and the study's jobs logged carries it.
    assert shown.returncode == 0, shown.stderr
    assert f"trace: {CALLER_TRACE}" in shown.stdout.splitlines()
    assert listed.returncode == 0, listed.stderr
    assert any(line.endswith(f"trace {CALLER_TRACE}") for line in listed.stdout.splitlines())
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    studied = [line for line in lines if line.get("study") == sid or line.get("job_id") in jobs]
    assert any(line["event"] == "study ended" for line in studied)
    untraced = [line for line in studied if line.get("trace_id") != CALLER_TRACE]
    assert studied and not untraced, untraced
