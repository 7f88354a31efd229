"""A study's labels as a client sees them over gRPC: pointwise by default where a judge can
grade, probes within the rate and the budget, a human sample that calibrates the labels and
makes the intervals prediction-powered (at the start or later, judging nothing again), and a
study none of whose queries was judged failing rather than reporting invented labels."""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from study_calls import Stubs, paid_calls, started_study, study_jobs, study_queries, until_final
from study_data import Collection, collection, inputs_request, oracle_ranking

from tierank.client.commands.study import progress_line
from tierank.evaluation import cohen_kappa, parse_qrels
from tierank.evaluation.grade_model import fit_grade_model
from tierank.limits import DEFAULT_PROBE_RATE, MIN_PROBES
from tierank.server.studies.labels import (
    Labeller,
    ProbeReadings,
    QueryOrder,
    Sample,
    fit_models,
)
from tierank.v1 import eval_pb2, rank_pb2, study_pb2

QUERIES = 6
DEPTH = 10


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _spec(**fields: object) -> study_pb2.StudySpec:
    # Noise breaks the grades' ties: without it they would fall in shown order, which the
    # server rightly calls position bias.
    ranking = oracle_ranking(noise=0.3, top_k=5, batch_size=5)
    return study_pb2.StudySpec(depth=DEPTH, ranking=ranking, **fields)  # type: ignore[arg-type]


def _grader(**options: str) -> eval_pb2.TierMapping:
    judge = rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options=options)
    )
    return eval_pb2.TierMapping(pointwise=eval_pb2.PointwiseAnchoring(judge=judge))


async def _qrels(stubs: Stubs, name: str) -> dict[str, dict[str, int]]:
    page = await stubs.studies.ExportStudyQrels(study_pb2.ExportStudyQrelsRequest(name=name))
    return parse_qrels(page.qrels.splitlines(), "export") if page.qrels else {}


async def _report(stubs: Stubs, name: str) -> study_pb2.StudyReport:
    return await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=name))


def _sample_request(
    study: str, data: Collection, queries: list[str], request_id: str = "sample"
) -> study_pb2.AddStudyInputsRequest:
    """The hidden grades of `queries`, as a person's labels of them."""
    request = study_pb2.AddStudyInputsRequest(study=study, request_id=request_id)
    request.human_sample.extend(
        study_pb2.HumanJudgment(query_id=qid, doc_id=doc, grade=grade)
        for qid in queries
        for doc, grade in data.grades[qid].items()
    )
    return request


def _kappa(labels: dict[str, dict[str, int]], data: Collection) -> float:
    ours = [grade for qid, docs in labels.items() for grade in docs.values()]
    theirs = [data.grades[qid][doc] for qid, docs in labels.items() for doc in docs]
    kappa = cohen_kappa(ours, theirs, categories=[0, 1, 2, 3])
    assert kappa is not None
    return kappa


async def test_a_judge_that_can_grade_gets_pointwise_labels_within_the_probe_rate(stubs: Stubs):
    data = collection(queries=QUERIES, docs=30)
    study = await started_study(stubs, _spec(), inputs_request("", data))
    # The server chose the labels: the study's own (oracle) judge grades.
    assert study.spec.labels.pointwise.judge == study.spec.ranking.judges[0]
    ended = await until_final(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    queries = await study_queries(stubs, study.name)
    for query in queries:
        planned = min(query.pool_size, max(MIN_PROBES, math.floor(0.25 * query.pool_size)))
        assert 0 < len(query.probes) <= planned
        assert query.pointwise_calls == len(query.probes)  # the oracle answers every probe
    jobs = await study_jobs(stubs, study.name)
    listwise = sum([await paid_calls(stubs, job.name) for job in jobs])
    progress = ended.progress
    assert progress.pointwise_calls == sum(q.pointwise_calls for q in queries)
    assert progress.judge_calls == listwise + progress.pointwise_calls
    assert progress.pointwise_calls <= DEFAULT_PROBE_RATE * progress.pooled_documents + QUERIES
    report = await _report(stubs, study.name)
    assert report.labels.startswith("pointwise: oracle")
    assert report.cost.pointwise_calls == progress.pointwise_calls
    assert 0 < report.cost.pointwise_usage.input_tokens < report.cost.usage.input_tokens
    labels = await _qrels(stubs, study.name)
    # Every pooled document is labelled, and the labels are grades, not positions: a pool
    # this depth holds non-relevant documents, which rank bands would grade 1 or more.
    assert sum(len(docs) for docs in labels.values()) == progress.pooled_documents
    assert {0, 3} <= {grade for docs in labels.values() for grade in docs.values()}
    assert not report.warnings


async def test_pointwise_labels_agree_with_the_grades_better_than_rank_bands(stubs: Stubs):
    data = collection(queries=QUERIES, docs=30, seed=11)
    kappas = {}
    for name, labels in (
        ("pointwise", _grader(noise="0.8")),
        ("bands", eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands())),
    ):
        study = await started_study(stubs, _spec(labels=labels), inputs_request("", data))
        ended = await until_final(stubs, study.name)
        assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
        kappas[name] = _kappa(await _qrels(stubs, study.name), data)
        report = await _report(stubs, study.name)
        if name == "bands":  # positions 1-10 graded 3, 11-30 graded 2: every document
            assert any("every pooled document" in w for w in report.warnings)
    assert kappas["pointwise"] > kappas["bands"] + 0.15, kappas


async def test_the_probes_stay_within_the_studys_budget(stubs: Stubs):
    data = collection(queries=QUERIES, docs=30)
    budget = 40
    study = await started_study(
        stubs, _spec(budget=rank_pb2.Budget(max_judge_calls=budget)), inputs_request("", data)
    )
    ended = await until_final(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert ended.progress.pointwise_calls > 0
    assert ended.progress.judge_calls <= budget, "probes included, the budget holds"


async def test_a_grader_that_never_answers_fails_the_study_and_says_so(stubs: Stubs):
    data = collection(queries=3, docs=12)
    spec = _spec(labels=_grader(fail_rate="1"))
    ended = await until_final(
        stubs, (await started_study(stubs, spec, inputs_request("", data))).name
    )
    assert ended.state == study_pb2.STUDY_STATE_FAILED
    assert ended.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "pointwise grader answered none" in ended.error.message


async def test_a_study_no_judge_answered_fails_and_labels_nothing(stubs: Stubs):
    data = collection(queries=3, docs=12)
    ranking = oracle_ranking(noise=0.3, top_k=5, batch_size=5)
    ranking.judges[0].parameters.options["fail_rate"] = "1"
    spec = study_pb2.StudySpec(depth=DEPTH, ranking=ranking)
    study = await started_study(stubs, spec, inputs_request("", data, human=True))
    ended = await until_final(stubs, study.name, timeout=60)
    assert ended.state == study_pb2.STUDY_STATE_FAILED
    assert ended.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "no judge answered" in ended.error.message
    assert "oracle simulated a bad answer" in ended.error.message, "the judges' own reason"
    assert await _qrels(stubs, study.name) == {}, "no label is invented from the input order"
    report = await _report(stubs, study.name)
    assert (report.judged_queries, report.unjudged_queries) == (0, 3)
    assert all(m.count == 0 and not m.HasField("mean") for s in report.systems for m in s.measures)
    assert report.warnings and "not judged" in report.warnings[0]
    assert report.agreement.pairs == 0


async def test_a_human_sample_calibrates_and_makes_the_intervals_prediction_powered(
    stubs: Stubs,
):
    data = collection(queries=QUERIES, docs=30, seed=5)
    sampled = ["q1", "q4"]
    # Sent with the inputs, before the start.
    draft = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=_spec()))
    await stubs.studies.AddStudyInputs(inputs_request(draft.name, data))
    await stubs.studies.AddStudyInputs(_sample_request(draft.name, data, sampled))
    await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    ended = await until_final(stubs, draft.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert ended.inputs.human_sample_judgments == sum(len(data.grades[q]) for q in sampled)
    report = await _report(stubs, draft.name)
    assert report.interval_method == "ppi"
    assert report.sample.queries == len(sampled)
    # The person graded whole topics; the pools hold each system's top 10 of them.
    assert report.sample.judgments == sum(len(data.grades[q]) for q in sampled)
    assert 0 < report.sample.outside_pool < report.sample.judgments
    assert report.sample.pairs == report.sample.judgments - report.sample.outside_pool
    assert any("outside their query's pool" in warning for warning in report.warnings)
    assert report.sample.HasField("kappa") and report.sample.confusion.grades
    for system in report.systems:
        for interval in system.measures:
            if interval.HasField("mean"):
                assert 0 <= interval.low <= interval.mean <= interval.high <= 1
                assert interval.HasField("study_mean")
    labels = await _qrels(stubs, draft.name)
    for qid in sampled:  # the person's labels, whole
        assert labels[qid] == data.grades[qid]
    flagged = {q.query_id for q in await study_queries(stubs, draft.name) if q.human_labels}
    assert flagged == set(sampled)


async def test_calibrate_applies_a_later_sample_without_judging_again(stubs: Stubs):
    data = collection(queries=QUERIES, docs=30, seed=9)
    study = await started_study(stubs, _spec(), inputs_request("", data))
    ended = await until_final(stubs, study.name)
    before = await _report(stubs, study.name)
    assert before.interval_method == "bootstrap" and not before.HasField("sample")
    jobs = await study_jobs(stubs, study.name)

    refused = await _refusal(
        stubs.studies.CalibrateStudy(study_pb2.CalibrateStudyRequest(name=study.name))
    )
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT  # no sample sent yet

    await stubs.studies.AddStudyInputs(_sample_request(study.name, data, ["q0", "q3", "q5"]))
    calibrated = await stubs.studies.CalibrateStudy(
        study_pb2.CalibrateStudyRequest(name=study.name)
    )
    assert calibrated.state == ended.state and calibrated.progress == ended.progress
    assert len(await study_jobs(stubs, study.name)) == len(jobs), "nothing judged again"
    after = await _report(stubs, study.name)
    assert after.interval_method == "ppi" and after.sample.queries == 3
    assert after.cost == before.cost
    labels = await _qrels(stubs, study.name)
    assert labels["q3"] == data.grades["q3"]


async def test_a_bad_sample_is_refused_naming_what_is_wrong(stubs: Stubs):
    data = collection(queries=3, docs=10)
    draft = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=_spec()))
    await stubs.studies.AddStudyInputs(inputs_request(draft.name, data))
    bad_grade = study_pb2.AddStudyInputsRequest(study=draft.name, request_id="bad")
    bad_grade.human_sample.add(query_id="q0", doc_id="q0-d1", grade=7)
    bad_grade.human_sample.add(query_id="q0", doc_id="q0-d2", grade=-7)
    refused = await _refusal(stubs.studies.AddStudyInputs(bad_grade))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "human_sample[0].grade" in refused.details()
    assert "human_sample[1].grade" in refused.details()
    stranger = study_pb2.AddStudyInputsRequest(study=draft.name, request_id="stranger")
    stranger.human_sample.add(query_id="q99", doc_id="x", grade=2)
    await stubs.studies.AddStudyInputs(stranger)
    refused = await _refusal(stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name)))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "q99" in refused.details() and "human_sample" in refused.details()
    still = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name))
    assert still.state == study_pb2.STUDY_STATE_DRAFT, "nothing lost: it stays a draft"


async def _refusal(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call  # type: ignore[misc]
    return refused.value


def test_the_progress_line_says_a_pause_instead_of_an_eta_and_the_probes_under_way() -> None:
    study = study_pb2.Study(name="studies/s1", state=study_pb2.STUDY_STATE_RUNNING)
    study.progress.queries = 4
    study.progress.eta_seconds = 30
    study.progress.grading = 2
    line = progress_line(study)
    assert "2 queries' pointwise probes under way" in line and "ETA 30s" in line
    study.pause.reason = "the disk holding the database is full"
    study.pause.since.FromSeconds(int(time.time()) - 125)
    line = progress_line(study)
    assert "paused for 2m: the disk holding the database is full" in line
    assert "ETA" not in line
    study.state = study_pb2.STUDY_STATE_SUCCEEDED
    assert "paused" not in progress_line(study) and "probes" not in progress_line(study)


def test_predictions_come_from_the_probes_alone_whatever_the_sample() -> None:
    # Eight queries of twelve documents in order, probed every third position along a
    # falling grade; a person labels three of them, against the probes near the top. The
    # sample changes the labels it is reported with, and its queries' own labels come from
    # their folds' models, but every query's predictions are those of the probes' model.
    rng = random.Random(7)
    orders = []
    for q in range(8):
        documents = [f"q{q}d{i}" for i in range(12)]
        probes = {
            documents[i]: min(3, max(0, 3 - i // 3 + rng.choice((-1, 0, 1)))) for i in (0, 3, 6, 9)
        }
        orders.append(QueryOrder(f"q{q}", [[doc] for doc in documents], probes))
    human = {order.query_id: {doc: 0 for doc in order.documents[:6]} for order in orders[:3]}
    sample = Sample(human)
    spec = study_pb2.StudySpec(labels=_grader())
    readings = ProbeReadings()
    readings.add(orders, sample)
    probes_alone = fit_grade_model(readings.probed, seed=1)
    model, folds = fit_models(readings, sample, 1, probes_alone)
    labelled = Labeller(spec, sample, model, folds, predictor=probes_alone)
    with_sample = labelled.label(orders, predictions=True)
    without = Labeller(spec, Sample(), probes_alone).label(orders, predictions=True)
    assert [q.predictions for q in with_sample] == [q.predictions for q in without]
    assert [q.reported for q in with_sample] != [q.reported for q in without]
    # Not vacuous: the model with the sample in it would predict otherwise.
    by_model = Labeller(spec, sample, model, folds).label(orders, predictions=True)
    assert [q.predictions for q in by_model] != [q.predictions for q in without]
