"""EvalService through real gRPC: scores and agreement equal the pure functions' results."""

from __future__ import annotations

import pytest
from eval_service_support import BM25_RUN, DL_QRELS, DL_RUNS, text_file

from tierank.evaluation import (
    binary_kappa,
    cohen_kappa,
    evaluate,
    kendall_tau_b,
    labels_from_grade_levels,
    labels_from_rank_bands,
    parse_qrels,
    rank_biased_overlap,
    read_qrels,
    read_run,
    spearman_rho,
)
from tierank.v1 import eval_pb2, rank_pb2


def ndcg10(labels, run) -> float:
    (aggregate,) = evaluate(["nDCG@10"], labels, run).aggregate.values()
    return aggregate.mean


def qrels_source(path) -> eval_pb2.LabelSource:
    return eval_pb2.LabelSource(qrels=text_file(path))


@pytest.mark.usefixtures("shared_data")
async def test_dl19_bm25_scores_equal_the_pure_functions_and_trec_eval(eval_stub) -> None:
    measures = ["nDCG@10", "AP(rel=2)", "RR(rel=2)", "R(rel=2)@100"]
    response = await eval_stub.Evaluate(
        eval_pb2.EvaluateRequest(
            runs=[text_file(BM25_RUN)],
            labels=qrels_source(DL_QRELS),
            measures=measures,
            per_query=True,
        )
    )
    (run,) = response.runs
    assert run.run == BM25_RUN.name
    expected = evaluate(measures, read_qrels(DL_QRELS), read_run(BM25_RUN))
    got = {a.measure: a for a in run.aggregates}
    for measure, aggregate in expected.aggregate.items():
        assert got[str(measure)].mean == pytest.approx(aggregate.mean, abs=1e-12)
        assert got[str(measure)].count == aggregate.count == 43
    # trec_eval 10.0 on the same files (shared/data README).
    assert round(got["nDCG@10"].mean, 4) == 0.5058
    assert round(got["AP(rel=2)"].mean, 4) == 0.2476
    per_query = {(v.measure, v.query_id): v.value for v in run.per_query}
    assert len(per_query) == 4 * 43


async def test_scores_against_a_jobs_tiers_use_the_chosen_mapping(
    eval_stub, run_job, make_spec, oracle_judge
) -> None:
    job = await run_job(make_spec(n=12, judges=[oracle_judge(noise=0.0)], batch_size=4))
    tiers = [list(t.candidate_ids) for t in job.tiers]
    assert len(tiers) == 12  # noise-free oracle, distinct scores: a full order
    run_text = "".join(f"q1 Q0 c{i:03d} {i + 1} {100 - 3 * (i % 5)} sys\n" for i in range(12))
    mapping = eval_pb2.TierMapping(grade_levels=eval_pb2.GradeLevels(levels=4))
    response = await eval_stub.Evaluate(
        eval_pb2.EvaluateRequest(
            runs=[eval_pb2.TextFile(name="mixed.trec", content=run_text)],
            labels=eval_pb2.LabelSource(
                tiers=eval_pb2.TierLabels(
                    jobs=[eval_pb2.JobTiers(job=job.name, query_id="q1")], mapping=mapping
                )
            ),
            measures=["nDCG@5", "P(rel=3)@3"],
        )
    )
    labels = {"q1": labels_from_grade_levels(tiers, 4)}
    run = {"q1": {f"c{i:03d}": float(100 - 3 * (i % 5)) for i in range(12)}}
    expected = evaluate(["nDCG@5", "P(rel=3)@3"], labels, run)
    got = {a.measure: a.mean for a in response.runs[0].aggregates}
    assert got == {str(m): a.mean for m, a in expected.aggregate.items()}
    assert got["nDCG@5"] < 1.0  # the run is not the tiers' order, so this could fail
    (report,) = response.labeling
    assert (report.query_id, report.tier_count, report.labeled_documents) == ("q1", 12, 12)


async def test_export_qrels_with_rank_bands(eval_stub, run_job, make_spec, oracle_judge) -> None:
    job = await run_job(make_spec(n=14, judges=[oracle_judge(noise=0.0)]))
    bands = [
        eval_pb2.RankBand(last_position=3, grade=3),
        eval_pb2.RankBand(last_position=8, grade=1),
    ]
    response = await eval_stub.ExportQrels(
        eval_pb2.ExportQrelsRequest(
            tiers=eval_pb2.TierLabels(
                jobs=[eval_pb2.JobTiers(job=job.name, query_id="7")],
                mapping=eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands(bands=bands)),
            )
        )
    )
    exported = parse_qrels(response.qrels.splitlines())
    tiers = [list(t.candidate_ids) for t in job.tiers]
    assert exported == {"7": labels_from_rank_bands(tiers, ((3, 3), (8, 1)), 0)}
    assert sorted(exported["7"].values()).count(3) == 3


@pytest.mark.usefixtures("shared_data")
async def test_label_agreement_and_system_orderings(eval_stub) -> None:
    human = read_qrels(DL_QRELS)
    # A second label set: the human grades with every grade-1 label turned into 0 and
    # some 3s into 2s, so agreement is high but not perfect.
    other_lines = []
    for qid, judged in human.items():
        for i, (docid, grade) in enumerate(judged.items()):
            changed = 0 if grade == 1 else (2 if grade == 3 and i % 2 else grade)
            other_lines.append(f"{qid} 0 {docid} {changed}")
    other_text = "\n".join(other_lines)
    other = parse_qrels(other_lines)
    response = await eval_stub.CompareLabels(
        eval_pb2.CompareLabelsRequest(
            a=qrels_source(DL_QRELS),
            b=eval_pb2.LabelSource(qrels=eval_pb2.TextFile(name="other.txt", content=other_text)),
            runs=[text_file(path) for path in DL_RUNS],
        )
    )
    pairs = sorted((q, d) for q in human for d in human[q])
    a = [human[q][d] for q, d in pairs]
    b = [other[q][d] for q, d in pairs]
    assert response.shared_pairs == len(pairs) == 9260
    assert (response.only_a, response.only_b) == (0, 0)
    assert response.kappa == pytest.approx(cohen_kappa(a, b))
    assert response.quadratic_weighted_kappa == pytest.approx(cohen_kappa(a, b, "quadratic"))
    assert response.binary_kappa == pytest.approx(binary_kappa(a, b, 2))
    assert 0.3 < response.kappa < 1.0
    assert list(response.confusion.grades) == [0, 1, 2, 3]
    assert response.confusion.rows[1].counts[0] == a.count(1)  # every 1 became 0

    systems = response.systems
    assert systems.measure == "nDCG@10" and systems.query_count == 43
    scores_a = [s.score_a for s in systems.systems]
    scores_b = [s.score_b for s in systems.systems]
    runs = [read_run(path) for path in DL_RUNS]
    assert scores_a == pytest.approx([ndcg10(human, run) for run in runs])
    assert scores_b == pytest.approx([ndcg10(other, run) for run in runs])
    assert systems.kendall_tau_b == pytest.approx(kendall_tau_b(scores_a, scores_b))
    assert systems.spearman_rho == pytest.approx(spearman_rho(scores_a, scores_b))
    names = [s.run for s in systems.systems]
    order_a = [n for _, n in sorted(zip((-x for x in scores_a), names, strict=True))]
    order_b = [n for _, n in sorted(zip((-x for x in scores_b), names, strict=True))]
    assert systems.rbo_extrapolated == pytest.approx(rank_biased_overlap(order_a, order_b).value)


async def test_tier_labels_from_two_jobs_label_two_queries(
    eval_stub, run_job, make_spec, oracle_judge
) -> None:
    first = await run_job(make_spec(n=6, judges=[oracle_judge(noise=0.0)]))
    second = await run_job(make_spec(n=8, judges=[oracle_judge(noise=0.0)]))
    response = await eval_stub.ExportQrels(
        eval_pb2.ExportQrelsRequest(
            tiers=eval_pb2.TierLabels(
                jobs=[
                    eval_pb2.JobTiers(job=first.name, query_id="a"),
                    eval_pb2.JobTiers(job=second.name, query_id="b"),
                ]
            )
        )
    )
    exported = parse_qrels(response.qrels.splitlines())
    assert {q: len(d) for q, d in exported.items()} == {"a": 6, "b": 8}
    assert [r.job for r in response.labeling] == [first.name, second.name]
    assert first.state == rank_pb2.JOB_STATE_SUCCEEDED


@pytest.mark.usefixtures("shared_data")
async def test_a_byte_order_mark_is_not_part_of_the_first_query_id(eval_stub) -> None:
    # Any client may send a file as its editor saved it (issue 22, item 18).
    def request(mark: str) -> eval_pb2.EvaluateRequest:
        run = eval_pb2.TextFile(name="run", content=mark + BM25_RUN.read_text())
        qrels = eval_pb2.TextFile(name="qrels", content=mark + DL_QRELS.read_text())
        labels = eval_pb2.LabelSource(qrels=qrels)
        return eval_pb2.EvaluateRequest(runs=[run], labels=labels, per_query=True)

    plain = await eval_stub.Evaluate(request(""))
    marked = await eval_stub.Evaluate(request("\ufeff"))
    assert marked.runs[0].aggregates == plain.runs[0].aggregates
    assert marked.runs[0].per_query == plain.runs[0].per_query
