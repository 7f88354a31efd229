"""The blocking Client: the same surface as AsyncClient, against a real server."""

from __future__ import annotations

import grpc
import pytest

from tierank.client import Client, JobSpec, TierankError, job_spec
from tierank.v1 import rank_pb2


def test_rank_and_watch_replay_the_same_events(tierank_server: str, example_spec: JobSpec) -> None:
    with Client(tierank_server) as client:
        client.wait_ready(timeout=10)
        ranked = list(client.rank(example_spec, request_id="sync-rank-1", timeout=30))
        replayed = list(client.watch_job(ranked[0].job, timeout=30))
        job = client.get_job(ranked[0].job)
        verdict = next(e.verdict for e in ranked if e.HasField("verdict"))
        audited = client.get_verdict(ranked[0].job, verdict.call_id)

    assert [e.sequence for e in ranked] == list(range(1, len(ranked) + 1))
    assert replayed == ranked
    assert ranked[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert job.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert job.request_id == "sync-rank-1"
    assert audited.verdict == verdict


def test_rank_retry_with_request_id_replays_the_first_job(
    tierank_server: str, example_spec: JobSpec
) -> None:
    with Client(tierank_server) as client:
        first = list(client.rank(example_spec, request_id="sync-rank-2"))
        again = list(client.rank(example_spec, request_id="sync-rank-2"))
    assert again == first


def test_create_is_idempotent_and_list_pages(tierank_server: str, example_spec: JobSpec) -> None:
    with Client(tierank_server) as client:
        names = [client.create_job(example_spec, request_id=f"sync-{i}").name for i in range(3)]
        again = [client.create_job(example_spec, request_id=f"sync-{i}").name for i in range(3)]
        paged = [job.name for job in client.list_jobs(page_size=1)]
        one_page = [job.name for job in client.list_jobs(page_size=1000)]

    assert again == names
    assert len(set(names)) == 3
    assert paged == one_page
    assert set(names) <= set(paged)


def test_cancel(tierank_server: str, slow_spec: JobSpec) -> None:
    with Client(tierank_server) as client:
        job = client.create_job(slow_spec)
        cancelled = client.cancel_job(job.name)
        final = list(client.watch_job(job.name, timeout=30))[-1]
    assert cancelled.name == job.name
    assert final.completed.reason == rank_pb2.COMPLETION_REASON_CANCELLED


def test_errors_carry_code_and_field_violations(tierank_server: str) -> None:
    bad = job_spec("q", [{"id": "a", "text": "x"}, {"id": "b", "text": " "}], top_k=-1)
    with Client(tierank_server) as client:
        with pytest.raises(TierankError) as invalid:
            client.create_job(bad)
        with pytest.raises(TierankError) as missing:
            client.get_job("jobs/missing")
        with pytest.raises(TierankError) as missing_watch:
            next(client.watch_job("jobs/missing"))

    assert invalid.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert {v.field for v in invalid.value.field_violations} == {
        "spec.candidates[1].text",
        "spec.top_k",
    }
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert missing_watch.value.code == grpc.StatusCode.NOT_FOUND


def test_jobs_come_without_candidate_texts_unless_asked(
    tierank_server: str, example_spec: JobSpec
) -> None:
    texts = [c.text for c in example_spec.candidates]
    with Client(tierank_server) as client:
        basic = client.create_job(example_spec)
        full = client.get_job(basic.name, full=True)
        listed = next(j for j in client.list_jobs(full=True) if j.name == basic.name)
        assert [c.text for c in client.get_job(basic.name).spec.candidates] == [""] * len(texts)
    assert [c.id for c in basic.spec.candidates] == [c.id for c in example_spec.candidates]
    assert not any(c.text for c in basic.spec.candidates)
    assert [c.text for c in full.spec.candidates] == texts
    assert [c.text for c in listed.spec.candidates] == texts
