"""Jobs and studies by state, scraped from a real server's /metrics while a study runs and
after it and a draft have ended: counted in the database by tenant and state, never labelled
with an id; and a study's top-up is a span of its run, in its trace."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import anyio
import grpc
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector import TraceCollector, named
from study_calls import Stubs, started_study, study_id, study_jobs, until_final
from study_data import oracle_ranking

from tierank.client import LocalServer
from tierank.v1 import rank_pb2, study_pb2

TENANT = "default"


def _samples(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(series, labels) -> value of every tierank sample /metrics serves now."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("tierank_")
    }


def _value(samples: dict, series: str, **labels: str) -> float | None:
    return samples.get((series, tuple(sorted(labels.items()))))


def _jobs(samples: dict, state: str) -> float | None:
    return _value(samples, "tierank_jobs", tenant=TENANT, state=state)


def _studies(samples: dict, state: str) -> float | None:
    return _value(samples, "tierank_studies", tenant=TENANT, state=state)


def _top_up_spec() -> study_pb2.StudySpec:
    """Four queries, one at a time, on a budget their shares leave over (as in
    tests/studies/test_study_top_up.py): the study tops its provisional queries up."""
    ranking = oracle_ranking(noise=0.3, latency_ms=100, top_k=5, batch_size=4, max_in_flight=1)
    return study_pb2.StudySpec(
        depth=12,
        ranking=ranking,
        max_live_queries=1,
        budget=rank_pb2.Budget(max_judge_calls=8),
    )


def _inputs() -> study_pb2.AddStudyInputsRequest:
    request = study_pb2.AddStudyInputsRequest(request_id="all")
    run = request.runs.add(system="only")
    for q in range(4):
        qid = f"q{q}"
        request.topics.add(query_id=qid, text=f"topic {qid}")
        for d in range(12 if q < 3 else 1):
            doc = f"{qid}-d{d}"
            run.entries.add(query_id=qid, doc_id=doc, score=-d)
            request.passages.add(doc_id=doc, text=f"passage {doc}", metadata={"score": str(d)})
    return request


async def test_jobs_and_studies_by_state_while_a_study_runs_and_once_it_has_ended(
    tmp_path: Path,
):
    with TraceCollector() as collector:
        server = LocalServer(
            db=tmp_path / "tierank.db",
            extra_args=("--metrics-listen", "127.0.0.1:0", "--otlp-endpoint", collector.endpoint),
            env={"OTEL_BSP_SCHEDULE_DELAY": "50"},
        )
        with server:
            metrics = server.metrics_address
            async with grpc.aio.insecure_channel(server.address) as channel:
                stubs = Stubs.on(channel)
                draft = await stubs.studies.CreateStudy(
                    study_pb2.CreateStudyRequest(spec=_top_up_spec())
                )
                with_draft = _samples(metrics)
                study = await started_study(stubs, _top_up_spec(), _inputs())
                with anyio.fail_after(20):
                    while True:  # the study's first job is live for a second or so
                        running = _samples(metrics)
                        if _jobs(running, "JOB_STATE_RUNNING"):
                            break
                        await anyio.sleep(0.02)
                ended = await until_final(stubs, study.name)
                await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=draft.name))
                after = _samples(metrics)
                jobs = [job.name.rsplit("/", 1)[1] for job in await study_jobs(stubs, study.name)]
            sid = study_id(study.name)
            spans = collector.wait_for(
                lambda spans: any(
                    s.attributes.get("tierank.study.id") == sid
                    for s in named(spans, "tierank.study.end")
                )
            )

    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    # A draft counts as one, by tenant and state.
    assert _studies(with_draft, "STUDY_STATE_DRAFT") == 1
    # While the study runs: it and one of its jobs (one query at a time).
    assert _jobs(running, "JOB_STATE_RUNNING") == 1
    assert _studies(running, "STUDY_STATE_RUNNING") == 1
    assert _studies(running, "STUDY_STATE_DRAFT") == 1
    # Once both have ended, their states count 0 (the series stay), and how each ended is
    # counted.
    for state in ("STUDY_STATE_DRAFT", "STUDY_STATE_RUNNING"):
        assert _studies(after, state) == 0, state
    assert _jobs(after, "JOB_STATE_RUNNING") == 0
    finished = "tierank_studies_finished_total"
    assert _value(after, finished, tenant=TENANT, state="STUDY_STATE_SUCCEEDED") == 1
    assert _value(after, finished, tenant=TENANT, state="STUDY_STATE_CANCELLED") == 1
    # Bounded labels: no study's or job's id in any series.
    labels = {value for _, pairs in after for _, value in pairs}
    assert not labels & {sid, study_id(draft.name), *jobs}
    # The top-up (the leftover budget spent on the provisional queries) is a span of the run.
    (run,) = [
        s for s in named(spans, "tierank.study.run") if s.attributes["tierank.study.id"] == sid
    ]
    (top_up, *later) = [
        s for s in named(spans, "tierank.study.top_up") if s.parent_id == run.span_id
    ]
    assert top_up.attributes["tierank.study.queries_reopened"] >= 1
    assert all(s.attributes["tierank.study.queries_reopened"] == 0 for s in later)
    assert top_up.trace_id == run.trace_id == ended.trace_id
