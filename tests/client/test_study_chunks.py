"""A study's inputs cut into AddStudyInputs chunks: each under the size limit, every item sent
once, the same request ids on a second cut (a restarted upload adds nothing twice), also when
the second upload carries more (a run sent again with the passages it lacked)."""

from __future__ import annotations

from tierank.client._study import CHUNK_BYTES, StudyFiles, chunks


def files(queries: int, docs: int) -> StudyFiles:
    runs = {
        system: {f"q{q}": {f"d{q}-{d}": float(-d) for d in range(docs)} for q in range(queries)}
        for system in ("bm25", "dense")
    }
    passages = {
        f"d{q}-{d}": ("x" * 700, {"score": "1"}) for q in range(queries) for d in range(docs)
    }
    topics = {f"q{q}": f"topic {q}" for q in range(queries)}
    return StudyFiles(topics=topics, runs=runs, passages=passages, human={"q0": {"d0-0": 2}})


def test_chunks_stay_under_the_limit_and_carry_every_item_once() -> None:
    study = files(queries=300, docs=40)
    cut = list(chunks(study, "upload"))

    assert len(cut) > 3
    assert all(chunk.ByteSize() <= CHUNK_BYTES for chunk in cut)
    entries = [
        (run.system, e.query_id, e.doc_id) for c in cut for run in c.runs for e in run.entries
    ]
    assert len(entries) == len(set(entries)) == 2 * 300 * 40
    assert sorted(p.doc_id for c in cut for p in c.passages) == sorted(study.passages)
    assert [t.query_id for c in cut for t in c.topics] == list(study.topics)
    assert [(j.query_id, j.doc_id, j.grade) for c in cut for j in c.human_qrels] == [
        ("q0", "d0-0", 2)
    ]
    assert [c.request_id for c in cut] == [c.request_id for c in chunks(study, "upload")]
    assert len({c.request_id for c in cut}) == len(cut)


def test_a_chunk_keeps_its_request_id_when_other_inputs_join_it() -> None:
    study = files(queries=50, docs=40)
    runs_only = StudyFiles(topics={}, runs=study.runs)
    with_passages = StudyFiles(topics={}, runs=study.runs, passages=study.passages)
    first = {c.request_id for c in chunks(runs_only, "add")}
    second = {c.request_id for c in chunks(with_passages, "add")}
    assert first < second, "the run's chunks are the same, the passages' are new"
    changed = StudyFiles(topics={}, runs={"bm25": {"q0": {"d0-0": 9.0}}})
    assert not {c.request_id for c in chunks(changed, "add")} & first
