"""Bad study input over real gRPC: each problem INVALID_ARGUMENT with a field violation that
names it, and nothing stored or started because of it."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from study_calls import Stubs, started_study, study_jobs, until_final
from study_data import collection, inputs_request, oracle_ranking

from tierank.client._errors import error_from_rpc
from tierank.v1 import rank_pb2, study_pb2


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


async def _refused(call) -> dict[str, str]:
    """The field violations of an INVALID_ARGUMENT answer."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    return _violations(refused.value)


def _spec(**fields: object) -> study_pb2.StudySpec:
    return study_pb2.StudySpec(depth=3, ranking=oracle_ranking(top_k=3), **fields)


async def _draft(stubs: Stubs) -> study_pb2.Study:
    return await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=_spec()))


# -- chunks --------------------------------------------------------------------------------------


def _chunk(study: str) -> study_pb2.AddStudyInputsRequest:
    return inputs_request(study, collection(queries=2, docs=4), request_id="chunk")


def _break_chunk(chunk: study_pb2.AddStudyInputsRequest, case: str) -> None:
    if case == "empty request_id":
        chunk.request_id = ""
    elif case == "space in a query id":
        chunk.topics[1].query_id = "q 1"
    elif case == "empty topic":
        chunk.topics[0].text = " \n"
    elif case == "tab in a system":
        chunk.runs[2].system = "po\tor"
    elif case == "empty doc id":
        chunk.runs[0].entries[3].doc_id = ""
    elif case == "space in a run's query id":
        chunk.runs[1].entries[0].query_id = " q0"
    elif case == "NaN score":
        chunk.runs[0].entries[2].score = math.nan
    elif case == "infinite score":
        chunk.runs[1].entries[5].score = -math.inf
    elif case == "empty passage":
        chunk.passages[4].text = "  "
    elif case == "NUL in a passage id":
        chunk.passages[2].doc_id = "d\0"
    elif case == "space in a judged doc":
        chunk.human_qrels.add(query_id="q0", doc_id="a b", grade=1)
    elif case == "NUL in a passage":
        chunk.passages[4].text = "a passage\0with a NUL"
    elif case == "NUL in a passage's metadata key":
        chunk.passages[1].metadata["no\0te"] = "v"
    elif case == "NUL in a passage's metadata value":
        chunk.passages[1].metadata["note"] = "v\0"
    elif case.startswith(("human qrels grade", "human sample grade")):
        judgments = chunk.human_qrels if case.startswith("human qrels") else chunk.human_sample
        judgments.add(query_id="q0", doc_id="q0-d0", grade=int(case.rpartition(" ")[2]))
    else:
        raise AssertionError(case)


CHUNK_CASES = {
    "empty request_id": ("request_id", "required"),
    "space in a query id": ("topics[1].query_id", "white space"),
    "empty topic": ("topics[0].text", "empty"),
    "tab in a system": ("runs[2].system", "white space"),
    "empty doc id": ("runs[0].entries[3].doc_id", "1 to"),
    "space in a run's query id": ("runs[1].entries[0].query_id", "white space"),
    "NaN score": ("runs[0].entries[2].score", "finite"),
    "infinite score": ("runs[1].entries[5].score", "finite"),
    "empty passage": ("passages[4].text", "empty"),
    "NUL in a passage id": ("passages[2].doc_id", "NUL"),
    "space in a judged doc": ("human_qrels[0].doc_id", "white space"),
    "NUL in a passage": ("passages[4].text", "NUL"),
    "NUL in a passage's metadata key": ("passages[1].metadata", "keys must not contain NUL"),
    "NUL in a passage's metadata value": ("passages[1].metadata['note']", "NUL"),
    f"human qrels grade {2**31 - 1}": ("human_qrels[0].grade", "between -2 and 10"),
    "human qrels grade -7": ("human_qrels[0].grade", "between -2 and 10"),
    f"human sample grade {2**31 - 1}": ("human_sample[0].grade", "between 0 and 3"),
    "human sample grade -7": ("human_sample[0].grade", "between 0 and 3"),
}


@pytest.mark.parametrize("case", CHUNK_CASES)
async def test_a_bad_chunk_names_its_field_and_adds_nothing(stubs: Stubs, case: str):
    draft = await _draft(stubs)
    chunk = _chunk(draft.name)
    _break_chunk(chunk, case)
    violations = await _refused(stubs.studies.AddStudyInputs(chunk))
    field, words = CHUNK_CASES[case]
    assert field in violations, violations
    assert words in violations[field]
    after = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name))
    assert after.inputs == study_pb2.StudyInputs()
    # The request_id was not used up: the chunk, mended, is added.
    added = await stubs.studies.AddStudyInputs(_chunk(draft.name))
    assert added.added


async def test_a_chunk_with_many_problems_lists_the_first_and_counts_the_rest(stubs: Stubs):
    draft = await _draft(stubs)
    chunk = _chunk(draft.name)
    for run in chunk.runs:  # 3 systems, 2 queries, 4 documents: 24 problems
        for entry in run.entries:
            entry.score = math.nan
    violations = await _refused(stubs.studies.AddStudyInputs(chunk))
    listed = [field for field in violations if field]
    assert all(field.endswith("].score") for field in listed)
    assert f"and {24 - len(listed)} more problems" == violations[""]


# -- starting ------------------------------------------------------------------------------------


async def test_a_start_without_topics_or_passages_names_what_is_missing_and_stays_a_draft(
    stubs: Stubs,
):
    data = collection(queries=3, docs=4)
    draft = await _draft(stubs)
    chunk = inputs_request(draft.name, data, request_id="most")
    del chunk.topics[2]  # q2 is in the runs
    missing_passage = chunk.runs[0].entries[0].doc_id
    chunk.runs[0].entries[0].score = 1e9  # ranked first, so pooled at any depth
    kept = [p for p in chunk.passages if p.doc_id != missing_passage]
    del chunk.passages[:]
    chunk.passages.extend(kept)
    await stubs.studies.AddStudyInputs(chunk)

    violations = await _refused(
        stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    )
    assert "q2" in violations["topics"] and "1 queries" in violations["topics"]
    assert missing_passage in violations["passages"]
    still = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name))
    assert still.state == study_pb2.STUDY_STATE_DRAFT
    assert await study_jobs(stubs, draft.name) == []

    # What was missing, sent in another chunk, lets it start.
    rest = study_pb2.AddStudyInputsRequest(study=draft.name, request_id="rest")
    rest.topics.add(query_id="q2", text=data.topics["q2"])
    rest.passages.add(
        doc_id=missing_passage, text=data.passages[missing_passage], metadata={"score": "1"}
    )
    await stubs.studies.AddStudyInputs(rest)
    started = await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    assert started.state == study_pb2.STUDY_STATE_RUNNING
    assert (await until_final(stubs, draft.name)).state == study_pb2.STUDY_STATE_SUCCEEDED


async def test_conflicting_chunks_are_found_at_the_start(stubs: Stubs):
    draft = await _draft(stubs)
    data = collection(queries=2, docs=4)
    await stubs.studies.AddStudyInputs(inputs_request(draft.name, data, request_id="one"))
    other = study_pb2.AddStudyInputsRequest(study=draft.name, request_id="two")
    other.topics.add(query_id="q0", text="another text")
    other.runs.add(system="good").entries.add(query_id="q1", doc_id="q1-d0", score=3.0)
    await stubs.studies.AddStudyInputs(other)
    violations = await _refused(
        stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    )
    assert "two different texts" in violations["topics"]
    assert "twice" in violations["runs"]


async def test_a_start_with_no_run_is_refused(stubs: Stubs):
    draft = await _draft(stubs)
    chunk = _chunk(draft.name)
    del chunk.runs[:]
    await stubs.studies.AddStudyInputs(chunk)
    violations = await _refused(
        stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    )
    assert "at least one system" in violations["runs"]


async def test_judges_that_cannot_judge_the_pools_are_found_at_the_start(stubs: Stubs):
    spec = _spec()
    spec.ranking.judges[0].parameters.options["score_key"] = "grade"  # passages have "score"
    draft = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    await stubs.studies.AddStudyInputs(_chunk(draft.name))
    violations = await _refused(
        stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    )
    assert any(field.startswith("spec.ranking.") for field in violations), violations
    assert (
        await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name))
    ).state == study_pb2.STUDY_STATE_DRAFT


# -- creating ------------------------------------------------------------------------------------

SpecChange = Callable[[study_pb2.StudySpec], None]


def _set(**fields: object) -> SpecChange:
    def change(spec: study_pb2.StudySpec) -> None:
        for name, value in fields.items():
            setattr(spec, name, value)

    return change


def _pointwise_without_grader(spec: study_pb2.StudySpec) -> None:
    spec.labels.pointwise.SetInParent()


def _pointwise_lexical(spec: study_pb2.StudySpec) -> None:
    spec.labels.pointwise.judge.provider = "lexical"


def _probe_rate(spec: study_pb2.StudySpec) -> None:
    spec.labels.pointwise.judge.provider = "oracle"
    spec.labels.pointwise.probe_rate = 1.5


def _ranking_query(spec: study_pb2.StudySpec) -> None:
    spec.ranking.query = "a query of its own"


def _ranking_candidates(spec: study_pb2.StudySpec) -> None:
    spec.ranking.candidates.add(id="d1", text="a candidate of its own")


def _ranking_budget(spec: study_pb2.StudySpec) -> None:
    spec.ranking.budget.max_judge_calls = 10


def _ranking_deadline(spec: study_pb2.StudySpec) -> None:
    spec.ranking.deadline_seconds = 5


def _measures(spec: study_pb2.StudySpec) -> None:
    spec.measures[:] = ["nDCG@10", "nDCG@ten"]


def _deep_cutoff(spec: study_pb2.StudySpec) -> None:
    spec.measures[:] = ["nDCG@99999999999", "P@10"]


def _negative_budget(spec: study_pb2.StudySpec) -> None:
    spec.budget.max_judge_calls = -1


def _nan_cost(spec: study_pb2.StudySpec) -> None:
    spec.budget.max_cost_usd = math.nan


def _unknown_judge(spec: study_pb2.StudySpec) -> None:
    spec.ranking.judges[0].provider = "clairvoyant"


def _bad_batch(spec: study_pb2.StudySpec) -> None:
    spec.ranking.batch_size = 1


SPEC_CASES: dict[str, tuple[SpecChange, str]] = {
    "negative depth": (_set(depth=-1), "spec.depth"),
    "depth too deep": (_set(depth=1001), "spec.depth"),
    "negative live queries": (_set(max_live_queries=-2), "spec.max_live_queries"),
    "too many live queries": (_set(max_live_queries=257), "spec.max_live_queries"),
    "negative deadline": (_set(deadline_seconds=-1.0), "spec.deadline_seconds"),
    "infinite deadline": (_set(deadline_seconds=math.inf), "spec.deadline_seconds"),
    "far-off deadline": (_set(deadline_seconds=1e308), "spec.deadline_seconds"),
    "unknown measure": (_measures, "spec.measures[1]"),
    "a cutoff too deep": (_deep_cutoff, "spec.measures[0]"),
    "pointwise labels without a grader": (
        _pointwise_without_grader,
        "spec.labels.pointwise.judge.provider",
    ),
    "a grader that cannot grade": (_pointwise_lexical, "spec.labels.pointwise.judge.provider"),
    "a probe rate above 1": (_probe_rate, "spec.labels.pointwise.probe_rate"),
    "a query in the ranking": (_ranking_query, "spec.ranking.query"),
    "candidates in the ranking": (_ranking_candidates, "spec.ranking.candidates"),
    "a budget in the ranking": (_ranking_budget, "spec.ranking.budget"),
    "a deadline in the ranking": (_ranking_deadline, "spec.ranking.deadline_seconds"),
    "negative budget": (_negative_budget, "spec.budget.max_judge_calls"),
    "NaN cost": (_nan_cost, "spec.budget.max_cost_usd"),
    "unknown judge": (_unknown_judge, "spec.ranking.judges[0].provider"),
    "batch of one": (_bad_batch, "spec.ranking.batch_size"),
}


@pytest.mark.parametrize("case", SPEC_CASES)
async def test_a_bad_spec_names_its_field_and_creates_nothing(stubs: Stubs, case: str):
    change, field = SPEC_CASES[case]
    spec = _spec()
    change(spec)
    violations = await _refused(
        stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec, request_id=case))
    )
    assert field in violations, violations
    listed = await stubs.studies.ListStudies(study_pb2.ListStudiesRequest())
    assert not listed.studies
    # The request_id was not used up by the refusal.
    made = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=_spec(), request_id=case)
    )
    assert made.state == study_pb2.STUDY_STATE_DRAFT


async def test_a_request_id_reused_with_another_spec_is_refused(stubs: Stubs):
    first = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=_spec(), request_id="mine")
    )
    # The same spec, the default depth written out or not: the same study.
    same = _spec()
    again = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=same, request_id="mine")
    )
    assert again == first
    other = _spec()
    other.depth = 7
    violations = await _refused(
        stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=other, request_id="mine"))
    )
    assert first.name in violations["request_id"]
    listed = await stubs.studies.ListStudies(study_pb2.ListStudiesRequest())
    assert [s.name for s in listed.studies] == [first.name]


async def test_the_default_depth_written_out_is_the_same_request(stubs: Stubs):
    implicit = study_pb2.StudySpec(ranking=oracle_ranking(top_k=3))
    explicit = study_pb2.StudySpec(ranking=oracle_ranking(top_k=3), depth=20)
    first = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=implicit, request_id="d")
    )
    second = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=explicit, request_id="d")
    )
    assert second.name == first.name


# -- names and pages -----------------------------------------------------------------------------


async def test_bad_names_and_page_tokens_are_invalid_arguments(stubs: Stubs):
    data = collection(queries=3, docs=4)
    study = await started_study(stubs, _spec(), inputs_request("", data))
    await until_final(stubs, study.name)
    other = await started_study(stubs, _spec(), inputs_request("", data))
    await until_final(stubs, other.name)
    assert "name" in await _refused(
        stubs.studies.GetStudy(study_pb2.GetStudyRequest(name="jobs/x"))
    )
    chunk = _chunk("studies/")
    assert "study" in await _refused(stubs.studies.AddStudyInputs(chunk))
    listed = await stubs.studies.ListStudies(study_pb2.ListStudiesRequest(page_size=1))
    jobs = await stubs.rank.ListJobs(rank_pb2.ListJobsRequest(page_size=1))
    queries = await stubs.studies.ListStudyQueries(
        study_pb2.ListStudyQueriesRequest(name=study.name, page_size=1)
    )
    others = await stubs.studies.ListStudyQueries(
        study_pb2.ListStudyQueriesRequest(name=other.name, page_size=1)
    )
    qrels = await stubs.studies.ExportStudyQrels(
        study_pb2.ExportStudyQrelsRequest(name=study.name, page_size=1)
    )
    assert all(page.next_page_token for page in (listed, jobs, queries, others, qrels))
    # Tokens of other listings (or of another study's), and forged ones, are refused by name,
    # never an internal error.
    for token in ("garbage", jobs.next_page_token, listed.next_page_token, others.next_page_token):
        for call in (
            stubs.studies.ListStudyQueries(
                study_pb2.ListStudyQueriesRequest(name=study.name, page_token=token)
            ),
            stubs.studies.ExportStudyQrels(
                study_pb2.ExportStudyQrelsRequest(name=study.name, page_token=token)
            ),
        ):
            assert "page_token" in await _refused(call), token
    refused = await _refused(
        stubs.studies.ListStudyQueries(
            study_pb2.ListStudyQueriesRequest(name=study.name, page_token=qrels.next_page_token)
        )
    )
    assert "page_token" in refused
    assert "page_token" in await _refused(
        stubs.studies.ListStudies(study_pb2.ListStudiesRequest(page_token=queries.next_page_token))
    )
    for call in (
        stubs.studies.ListStudies(study_pb2.ListStudiesRequest(page_size=-1)),
        stubs.studies.ListStudyQueries(
            study_pb2.ListStudyQueriesRequest(name=study.name, page_size=-1)
        ),
        stubs.studies.ExportStudyQrels(
            study_pb2.ExportStudyQrelsRequest(name=study.name, page_size=-1)
        ),
    ):
        assert "page_size" in await _refused(call)


async def test_many_conflicts_still_leave_room_for_what_is_missing(stubs: Stubs):
    draft = await _draft(stubs)
    data = collection(queries=2, docs=15)
    chunk = inputs_request(draft.name, data, request_id="one")
    del chunk.topics[1]  # q1 has no topic
    await stubs.studies.AddStudyInputs(chunk)
    clashing = study_pb2.AddStudyInputsRequest(study=draft.name, request_id="two")
    for passage in data.passages:  # 30 passages sent again with other texts (twice: one clash)
        for i in range(2):
            clashing.passages.add(doc_id=passage, text=f"another text {i}")
    await stubs.studies.AddStudyInputs(clashing)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    violations = error_from_rpc(refused.value).field_violations
    assert len(violations) <= 20
    assert violations[0].field == "topics" and "q1" in violations[0].description
    conflicts = [v for v in violations if v.field == "passages"]
    assert all("two texts" in v.description for v in conflicts)
    assert violations[-1].description == f"and {30 - len(conflicts)} more problems"


async def test_a_start_without_room_for_its_scratch_inputs_is_refused_and_stays_a_draft(
    stubs: Stubs, tmp_path, monkeypatch
):
    """The server pools a study from a scratch file in its temporary directory: where that
    cannot be written, StartStudy says so (RESOURCE_EXHAUSTED) and the study waits as it was."""
    import tempfile

    draft = await _draft(stubs)
    await stubs.studies.AddStudyInputs(inputs_request(draft.name, collection(queries=2, docs=4)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-directory"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "temporary directory" in refused.value.details()
    assert error_from_rpc(refused.value).error_info.reason == "SCRATCH_UNAVAILABLE"
    still = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name))
    assert still.state == study_pb2.STUDY_STATE_DRAFT
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    started = await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    assert started.state == study_pb2.STUDY_STATE_RUNNING
    assert not list(scratch.iterdir()), "the scratch file is deleted once the study started"


@pytest.mark.parametrize("cost", [math.inf, math.nan, -0.5])
async def test_a_jobs_and_a_studys_budget_are_refused_by_one_rule(stubs: Stubs, cost: float):
    """The same limit, refused alike wherever a budget is sent: a job's spec, a study's, an
    extension's (once the rule said "must not be negative" for one and "must be a finite
    number, not negative" for the other)."""
    job = oracle_ranking(top_k=3)
    job.query = "a query"
    job.candidates.add(id="a", text="one")
    job.candidates.add(id="b", text="two")
    job.budget.max_cost_usd = cost
    for_job = await _refused(stubs.rank.CreateJob(rank_pb2.CreateJobRequest(spec=job)))
    study = _spec(budget=rank_pb2.Budget(max_cost_usd=cost))
    for_study = await _refused(stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=study)))
    draft = await _draft(stubs)
    extension = study_pb2.ExtendStudyRequest(
        name=draft.name, budget=rank_pb2.Budget(max_cost_usd=cost)
    )
    for_extension = await _refused(stubs.studies.ExtendStudy(extension))
    rule = for_job["spec.budget.max_cost_usd"]
    assert "finite" in rule and "negative" in rule
    assert for_study["spec.budget.max_cost_usd"] == rule
    assert for_extension["budget.max_cost_usd"] == rule
