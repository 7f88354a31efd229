"""Bad input is INVALID_ARGUMENT with BadRequest field violations naming field, file and line."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tierank.v1 import eval_pb2, rank_pb2

GOOD_QRELS = eval_pb2.TextFile(name="qrels.txt", content="1 0 a 1\n1 0 b 0\n")
GOOD_RUN = eval_pb2.TextFile(name="run.trec", content="1 Q0 a 1 2.0 x\n1 Q0 b 2 1.0 x\n")


def violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    status = rpc_status.from_call(error)
    assert status is not None
    found = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            found += [(v.field, v.description) for v in bad_request.field_violations]
    return found


def evaluate_request(
    qrels: eval_pb2.TextFile = GOOD_QRELS,
    runs: tuple[eval_pb2.TextFile, ...] = (GOOD_RUN,),
    measures: tuple[str, ...] = ("nDCG@10",),
) -> eval_pb2.EvaluateRequest:
    return eval_pb2.EvaluateRequest(
        runs=runs, labels=eval_pb2.LabelSource(qrels=qrels), measures=measures
    )


CASES = {
    "malformed qrels line": (
        evaluate_request(qrels=eval_pb2.TextFile(name="bad.qrels", content="1 0 a 1\n1 0 b\n")),
        "labels.qrels",
        "bad.qrels:2: expected 4 fields",
    ),
    "run with a duplicate document": (
        evaluate_request(
            runs=(
                GOOD_RUN,
                eval_pb2.TextFile(
                    name="dup.trec", content="1 Q0 a 1 2.0 x\n# note\n1 Q0 a 2 1.0 x\n"
                ),
            )
        ),
        "runs[1]",
        "dup.trec:3: document 'a' listed twice for query '1'",
    ),
    "unknown metric": (evaluate_request(measures=("nDCG@10", "MAPP")), "measures[1]", "MAPP"),
    "cutoff K <= 0": (evaluate_request(measures=("nDCG@0",)), "measures[0]", "must be positive"),
    "cutoff K too deep": (
        evaluate_request(measures=("nDCG@10", "nDCG@99999999999")),
        "measures[1]",
        "must be at most 10000",
    ),
    "empty qrels": (
        evaluate_request(qrels=eval_pb2.TextFile(name="empty.qrels", content="# none\n")),
        "labels.qrels",
        "empty.qrels: no judgments",
    ),
    "malformed run score": (
        evaluate_request(runs=(eval_pb2.TextFile(name="s.trec", content="1 Q0 a 1 high x\n"),)),
        "runs[0]",
        "s.trec:1: score 'high' is not a number",
    ),
    "no labels": (eval_pb2.EvaluateRequest(runs=[GOOD_RUN]), "labels", "qrels or tiers"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
async def test_evaluate_rejects_bad_input_naming_the_place(eval_stub, case: str) -> None:
    request, field, message = CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.Evaluate(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert any(f == field and message in d for f, d in violations(caught.value)), violations(
        caught.value
    )


async def test_export_rejects_bad_job_references(eval_stub) -> None:
    request = eval_pb2.ExportQrelsRequest(
        tiers=eval_pb2.TierLabels(
            jobs=[
                eval_pb2.JobTiers(job="nope", query_id="1"),
                eval_pb2.JobTiers(job="jobs/x", query_id=""),
            ]
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.ExportQrels(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {f for f, _ in violations(caught.value)}
    assert fields == {"tiers.jobs[0].job", "tiers.jobs[1].query_id"}

    missing = eval_pb2.ExportQrelsRequest(
        tiers=eval_pb2.TierLabels(jobs=[eval_pb2.JobTiers(job="jobs/absent", query_id="1")])
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.ExportQrels(missing)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_bands_must_increase(eval_stub, run_job, make_spec) -> None:
    job = await run_job(make_spec(n=4))
    bands = [eval_pb2.RankBand(last_position=10, grade=3), eval_pb2.RankBand(last_position=5)]
    request = eval_pb2.ExportQrelsRequest(
        tiers=eval_pb2.TierLabels(
            jobs=[eval_pb2.JobTiers(job=job.name, query_id="1")],
            mapping=eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands(bands=bands)),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.ExportQrels(request)
    assert [f for f, _ in violations(caught.value)] == ["tiers.mapping.rank_bands.bands"]


async def test_grading_rejects_a_judge_that_cannot_grade_and_empty_pairs(eval_stub) -> None:
    request = eval_pb2.GradePairsRequest(
        judge=rank_pb2.JudgeSpec(provider="lexical"),
        pairs=[eval_pb2.GradePair(query="q", passage=rank_pb2.Candidate(id="d", text="t"))],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.GradePairs(request)
    assert violations(caught.value)[0][0] == "judge"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await eval_stub.GradePairs(
            eval_pb2.GradePairsRequest(judge=rank_pb2.JudgeSpec(provider="oracle"))
        )
    assert violations(caught.value) == [("pairs", "must hold at least one pair")]


def _oracle_pair(score: str) -> eval_pb2.GradePairsRequest:
    passage = rank_pb2.Candidate(id="d", text="t", metadata={"score": score})
    return eval_pb2.GradePairsRequest(
        judge=rank_pb2.JudgeSpec(provider="oracle"),
        pairs=[eval_pb2.GradePair(query_id="1", query="q", passage=passage)],
    )


def _fill_with_passages(content: str) -> eval_pb2.FillQrelsRequest:
    return eval_pb2.FillQrelsRequest(
        qrels=GOOD_QRELS,
        runs=[eval_pb2.TextFile(name="run.trec", content="1 Q0 a 1 2.0 x\n1 Q0 c 2 1.0 x\n")],
        topics=eval_pb2.TextFile(name="topics.tsv", content="1\tquery\n"),
        passages=eval_pb2.TextFile(name="passages.jsonl", content=content),
        judge=rank_pb2.JudgeSpec(provider="oracle"),
    )


EXTREME_CASES = {
    "oracle score inf": ("GradePairs", _oracle_pair("inf"), "pairs[0].passage.metadata"),
    "oracle score nan": ("GradePairs", _oracle_pair("nan"), "pairs[0].passage.metadata"),
    "oracle score 1e400": ("GradePairs", _oracle_pair("1e400"), "pairs[0].passage.metadata"),
    "5,000-digit cutoff": (
        "Evaluate",
        evaluate_request(measures=("nDCG@" + "9" * 5000,)),
        "measures[0]",
    ),
    "100,000 brackets": ("FillQrels", _fill_with_passages("[" * 100_000), "passages"),
    "5,000-digit JSON number": (
        "FillQrels",
        _fill_with_passages('{"id": "c", "text": "t", "metadata": {"s": ' + "9" * 5000 + "}}"),
        "passages",
    ),
}


@pytest.mark.parametrize("case", list(EXTREME_CASES), ids=list(EXTREME_CASES))
async def test_extreme_values_are_invalid_argument_not_unknown(eval_stub, case: str) -> None:
    rpc, request, field = EXTREME_CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(eval_stub, rpc)(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert field in [f for f, _ in violations(caught.value)]
    assert "Error" not in caught.value.details() and "sys." not in caught.value.details()
