"""FillQrels's held-in report over gRPC: human-judged pairs from the same runs' tops, graded by
the same judge beside the holes, measured against the human grades and never added."""

from __future__ import annotations

import json

import grpc
import pytest
from test_bad_input import violations

from tierank.evaluation import cohen_kappa, confusion_matrix
from tierank.v1 import eval_pb2, rank_pb2

QUERIES = ("q1", "q2", "q3")
DOCS_PER_QUERY = 12
JUDGED_PER_QUERY = 8  # the first 8 of each query's run are judged, the last 4 are holes


def human_grade(i: int) -> int:
    return (i * 7) % 4


def fill_request(
    *,
    noise: float = 0.0,
    held_in_sample: int = 0,
    seed: int = 0,
    texts_for: int = DOCS_PER_QUERY,
) -> eval_pb2.FillQrelsRequest:
    """Three queries, twelve documents each in one run; the oracle's hidden score is the human
    grade for judged documents and grade 1 for the holes. Only the first `texts_for` documents
    of each query have texts, so some judged ones can lack them (the holes always have them)."""
    qrels, run, passages = [], [], []
    for q in QUERIES:
        for i in range(DOCS_PER_QUERY):
            doc = f"{q}-d{i}"
            run.append(f"{q} Q0 {doc} {i + 1} {100 - i} sys\n")
            if i < JUDGED_PER_QUERY:
                qrels.append(f"{q} 0 {doc} {human_grade(i)}\n")
            if i < texts_for or i >= JUDGED_PER_QUERY:
                score = human_grade(i) if i < JUDGED_PER_QUERY else 1
                record = {"id": doc, "text": f"text of {doc}", "metadata": {"score": score}}
                passages.append(json.dumps(record) + "\n")
    return eval_pb2.FillQrelsRequest(
        qrels=eval_pb2.TextFile(name="human.qrels", content="".join(qrels)),
        runs=[eval_pb2.TextFile(name="sys.trec", content="".join(run))],
        depth=DOCS_PER_QUERY,
        topics=eval_pb2.TextFile(
            name="t.tsv", content="".join(f"{q}\ttopic {q}\n" for q in QUERIES)
        ),
        passages=eval_pb2.TextFile(name="p.jsonl", content="".join(passages)),
        judge=rank_pb2.JudgeSpec(
            provider="oracle", parameters=rank_pb2.JudgeParameters(options={"noise": str(noise)})
        ),
        seed=seed,
        held_in_sample=held_in_sample,
    )


HOLES = len(QUERIES) * (DOCS_PER_QUERY - JUDGED_PER_QUERY)
JUDGED = len(QUERIES) * JUDGED_PER_QUERY


async def test_a_faithful_judge_agrees_perfectly_and_held_in_grades_are_not_added(
    eval_stub,
) -> None:
    request = fill_request(held_in_sample=10)
    response = await eval_stub.FillQrels(request)
    assert len(response.added) == HOLES
    assert {(g.doc_id.split("-d")[1], g.grade) for g in response.added} == {
        (str(i), 1) for i in range(JUDGED_PER_QUERY, DOCS_PER_QUERY)
    }
    # Only the holes were appended: the held-in pairs keep their human grades, once.
    assert response.qrels == request.qrels.content + "".join(
        f"{g.query_id} 0 {g.doc_id} {g.grade}\n" for g in response.added
    )
    assert response.stats.calls == HOLES + 10
    held_in = response.held_in
    assert held_in.pairs == 10
    assert held_in.kappa == pytest.approx(1.0)
    assert held_in.quadratic_weighted_kappa == pytest.approx(1.0)
    binary = held_in.binary_agreement
    assert (binary.count, binary.total, binary.value, binary.high) == (10, 10, 1.0, 1.0)
    assert binary.low == pytest.approx(0.7225, abs=1e-4)  # Wilson's lower bound for 10/10
    assert list(held_in.confusion.grades) == [0, 1, 2, 3]
    rows = [list(row.counts) for row in held_in.confusion.rows]
    assert sum(map(sum, rows)) == 10
    assert all(rows[i][j] == 0 for i in range(4) for j in range(4) if i != j)


async def test_the_sample_is_drawn_by_seed_and_capped_at_the_judged_pairs(eval_stub) -> None:
    def confusion(response: eval_pb2.FillQrelsResponse) -> list[list[int]]:
        return [list(row.counts) for row in response.held_in.confusion.rows]

    first = await eval_stub.FillQrels(fill_request(held_in_sample=9, seed=4))
    again = await eval_stub.FillQrels(fill_request(held_in_sample=9, seed=4))
    assert confusion(first) == confusion(again)
    other_seeds = [
        confusion(await eval_stub.FillQrels(fill_request(held_in_sample=9, seed=s)))
        for s in range(5, 10)
    ]
    assert any(c != confusion(first) for c in other_seeds)
    everything = await eval_stub.FillQrels(fill_request(held_in_sample=1000))
    assert everything.held_in.pairs == JUDGED
    assert everything.stats.calls == HOLES + JUDGED
    # Judged pairs without texts are passed over, not refused.
    partial = await eval_stub.FillQrels(fill_request(held_in_sample=1000, texts_for=5))
    assert partial.held_in.pairs == len(QUERIES) * 5
    none = await eval_stub.FillQrels(fill_request())
    assert not none.HasField("held_in") and none.stats.calls == HOLES


async def test_a_noisy_judge_is_measured_against_the_human_grades(eval_stub) -> None:
    # Every judged pair is held in, so the same grades can be asked for directly: the oracle
    # answers a pair the same way for the same seed, query id and document.
    request = fill_request(noise=1.0, held_in_sample=JUDGED, seed=11)
    held_in = (await eval_stub.FillQrels(request)).held_in
    judged = [
        (q, i) for q in QUERIES for i in range(JUDGED_PER_QUERY)
    ]  # every judged pair has a text here
    direct = await eval_stub.GradePairs(
        eval_pb2.GradePairsRequest(
            judge=request.judge,
            seed=11,
            pairs=[
                eval_pb2.GradePair(
                    query_id=q,
                    query=f"topic {q}",
                    passage=rank_pb2.Candidate(
                        id=f"{q}-d{i}",
                        text=f"text of {q}-d{i}",
                        metadata={"score": str(human_grade(i))},
                    ),
                )
                for q, i in judged
            ],
        )
    )
    human = [human_grade(i) for _, i in judged]
    machine = [g.grade for g in direct.grades]
    assert human != machine  # noise of one grade moves some of 24
    assert held_in.pairs == JUDGED
    assert held_in.kappa == pytest.approx(cohen_kappa(human, machine, categories=range(4)))
    assert held_in.quadratic_weighted_kappa == pytest.approx(
        cohen_kappa(human, machine, "quadratic", range(4))
    )
    expected = confusion_matrix(human, machine, range(4))
    assert [tuple(row.counts) for row in held_in.confusion.rows] == list(expected.counts)
    same_side = sum((h >= 2) == (m >= 2) for h, m in zip(human, machine, strict=True))
    assert (held_in.binary_agreement.count, held_in.binary_agreement.total) == (same_side, JUDGED)
    assert held_in.binary_agreement.low <= same_side / JUDGED <= held_in.binary_agreement.high


@pytest.mark.parametrize("size", [-1, 10_001])
async def test_held_in_sample_out_of_range_is_a_field_violation(eval_stub, size: int) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.FillQrels(fill_request(held_in_sample=size))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violations(caught.value) == [("held_in_sample", "must be between 0 and 10000")]


async def test_held_in_pairs_the_judge_fails_on_are_left_out(eval_stub) -> None:
    # The oracle cannot grade a passage without its hidden score: a failed call, not a grade.
    request = fill_request(held_in_sample=5)
    lines = request.passages.content.splitlines(keepends=True)
    request.passages.content = "".join(
        line.replace('"metadata": {"score": ', '"metadata": {"other": ')
        if int(json.loads(line)["id"].split("-d")[1]) < JUDGED_PER_QUERY
        else line
        for line in lines
    )
    response = await eval_stub.FillQrels(request)
    assert response.HasField("held_in")
    assert response.held_in.pairs == 0
    assert not response.held_in.HasField("binary_agreement")
    assert not response.held_in.HasField("kappa")
    assert response.stats.calls == HOLES + 5 and response.stats.failed_calls == 5
    assert all(not g.failure_reason for g in response.added)
