"""The Python clients' study calls against a real server: the files' inputs cut into chunks,
sent (twice: the second upload adds nothing), started, watched to the end and reported on."""

from __future__ import annotations

from pathlib import Path

import anyio
from study_data import collection, oracle_ranking

from tierank.client import AsyncClient, Client, LocalServer
from tierank.client._study import StudyFiles, chunks
from tierank.v1 import study_pb2


def study_files() -> StudyFiles:
    data = collection(queries=4, docs=20)
    grade_of = {doc: g for per_query in data.grades.values() for doc, g in per_query.items()}
    passages = {doc: (text, {"score": str(grade_of[doc])}) for doc, text in data.passages.items()}
    return StudyFiles(topics=data.topics, runs=data.runs, passages=passages, human=data.grades)


def spec() -> study_pb2.StudySpec:
    return study_pb2.StudySpec(depth=8, ranking=oracle_ranking(noise=0.3, top_k=5))


async def test_the_async_client_runs_a_study_to_its_report(server_address: str) -> None:
    files = study_files()
    async with AsyncClient(server_address) as client:
        study = await client.create_study(spec(), request_id="async-1")
        study = await client.add_study_inputs(study.name, chunks(files, "up"))
        again = await client.add_study_inputs(study.name, chunks(files, "up"))
        assert again.inputs == study.inputs  # the same chunks, counted once
        await client.start_study(study.name)
        with anyio.fail_after(60):
            seen = [s async for s in client.watch_study(study.name)]
        report = await client.get_study_report(study.name)
    assert seen[-1].state == study_pb2.STUDY_STATE_SUCCEEDED
    assert seen[-1].progress.queries == 4
    assert list(report.ranking) == ["good", "fair", "poor"]
    assert not report.queries  # per query: ListStudyQueries


def test_the_blocking_client_runs_a_study_and_pages_its_queries(tmp_path: Path) -> None:
    files = study_files()
    # A server process of its own: a blocking client would block an in-process server's loop.
    with LocalServer(db=tmp_path / "tierank.db") as server, Client(server.address) as client:
        study = client.create_study(spec())
        client.add_study_inputs(study.name, chunks(files, "up"))
        client.start_study(study.name)
        ended = list(client.watch_study(study.name, timeout=60))[-1]
        queries = list(client.list_study_queries(study.name))
        qrels = client.export_study_qrels(study.name)
        listed = [s.name for s in client.list_studies()]
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert [q.query_id for q in queries] == list(files.topics)
    assert {line.split()[0] for line in qrels.splitlines()} == set(files.topics)
    assert listed == [study.name]
