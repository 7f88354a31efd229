"""QualifyJudge through a real server: the oracle's measured accuracy matches the analytic value
of its noise, a judge that repeats the shown order (through the real OpenAI SDK against the fake
provider) is found useless, qualifications are per tenant, and jobs are admitted by them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from statistics import NormalDist

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from cli_process import tierank
from graded_fakes import GradedResponder

from tierank.client import candidate, job_spec, judge
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2, rank_pb2_grpc

QUERIES = 16
DOCS_PER_QUERY = 12  # three of each grade 0..3


def labelled_files(directory: Path) -> dict[str, Path]:
    """Qrels, topics and passages of QUERIES queries; a passage's text names its id and grade
    (the fake provider reads them) and its metadata carries the grade (the oracle reads it)."""
    qrels, topics, passages = [], [], []
    for q in range(QUERIES):
        topics.append(f"q{q}\tquestion number {q}")
        for d in range(DOCS_PER_QUERY):
            doc, grade = f"c{q * DOCS_PER_QUERY + d:03d}", d % 4
            qrels.append(f"q{q} 0 {doc} {grade}")
            text = f"passage {doc} grade {grade}: words about question {q}"
            passages.append(json.dumps({"id": doc, "text": text, "metadata": {"score": grade}}))
    files = {"qrels": qrels, "topics": topics, "passages": passages}
    paths = {}
    for name, lines in files.items():
        paths[name] = directory / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n")
    return paths


def request(
    files: dict[str, Path], spec: rank_pb2.JudgeSpec, **fields
) -> eval_pb2.QualifyJudgeRequest:
    def text(name: str) -> eval_pb2.TextFile:
        return eval_pb2.TextFile(name=name, content=files[name].read_text())

    return eval_pb2.QualifyJudgeRequest(
        judge=spec, qrels=text("qrels"), topics=text("topics"), passages=text("passages"), **fields
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return labelled_files(tmp_path)


async def test_the_oracles_accuracy_matches_its_noise(server_address: str, files, oracle_judge):
    sigma = 1.0
    async with grpc.aio.insecure_channel(server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        result = await stub.QualifyJudge(
            request(
                files, oracle_judge(noise=sigma), batch_size=12, shuffles=3, batches_per_query=1
            )
        )
    listwise = result.listwise
    assert result.query_count == QUERIES and result.usable
    assert result.cost.calls == QUERIES * 3 and result.cost.failed_calls == 0
    for gap in listwise.by_gap:
        expected = NormalDist().cdf(gap.gap / (sigma * math.sqrt(2)))
        assert gap.accuracy.low <= expected <= gap.accuracy.high, (gap.gap, expected, gap)
    # An unbiased judge shows no position bias worth reporting.
    assert result.verdict.startswith("usable: pair accuracy")
    assert "position bias" not in result.verdict
    assert result.weight > 0


async def test_a_judge_that_repeats_the_shown_order_is_not_usable(
    llm_server_address: str, fake_llm, files
):
    def shown_order(ranked):
        return sorted(ranked, key=lambda p: p.number)

    fake_llm.respond_with("openai", GradedResponder(name="openai", twist=shown_order))
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        result = await stub.QualifyJudge(request(files, judge("openai:gpt-4.1-mini"), batch_size=8))
    listwise = result.listwise
    assert listwise.repeats_shown_order.value == 1.0
    assert listwise.first_position[0].ranked_first.value == 1.0
    assert not result.usable and result.weight == 0
    assert result.verdict.startswith("not usable")
    assert result.cost.usage.input_tokens > 0  # real calls, through the SDK
    # Issue 22 item 15: the one line says why, and it is what `tierank qualifications` lists.
    assert "; position bias: position 1 ranked first 100% (chance 12%)" in result.verdict
    assert "repeats the shown order in 100% of answers" in result.verdict
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        listed = await eval_pb2_grpc.EvalServiceStub(channel).ListQualifications(
            eval_pb2.ListQualificationsRequest()
        )
    assert [q.verdict for q in listed.qualifications] == [result.verdict]


async def test_jobs_are_admitted_by_the_latest_qualification(
    server_address: str, files, oracle_judge
):
    useless, good = oracle_judge(noise=1000.0), oracle_judge(noise=0.5)
    async with grpc.aio.insecure_channel(server_address) as channel:
        evals = eval_pb2_grpc.EvalServiceStub(channel)
        ranks = rank_pb2_grpc.RankServiceStub(channel)
        spec = job_spec("q", [candidate(f"d{i}", f"text {i}", {"score": i}) for i in range(6)])

        def with_judge(judge_spec: rank_pb2.JudgeSpec, **fields) -> rank_pb2.JobSpec:
            made = rank_pb2.JobSpec()
            made.CopyFrom(spec)
            del made.judges[:]
            made.judges.append(judge_spec)
            for name, value in fields.items():
                setattr(made, name, value)
            return made

        # No qualification yet: weight=qualified cannot be honoured.
        wanting = rank_pb2.JudgeSpec()
        wanting.CopyFrom(good)
        wanting.weight_from_qualification = True
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ranks.CreateJob(rank_pb2.CreateJobRequest(spec=with_judge(wanting)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "judges[0].weight_from_qualification" in str(refused.value.debug_error_string())

        bad = await evals.QualifyJudge(request(files, useless, batch_size=8))
        assert not bad.usable
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ranks.CreateJob(rank_pb2.CreateJobRequest(spec=with_judge(useless)))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert bad.name in refused.value.details()
        insisted = await ranks.CreateJob(
            rank_pb2.CreateJobRequest(
                spec=with_judge(useless, allow_unqualified_judges=True),
                view=rank_pb2.JOB_VIEW_FULL,
            )
        )
        assert insisted.spec.judges[0].qualification == bad.name

        qualified = await evals.QualifyJudge(request(files, good, batch_size=8))
        assert qualified.usable
        job = await ranks.CreateJob(
            rank_pb2.CreateJobRequest(
                spec=with_judge(wanting), request_id="weighted", view=rank_pb2.JOB_VIEW_FULL
            )
        )
        assert job.spec.judges[0].weight == pytest.approx(qualified.weight)
        assert job.spec.judges[0].qualification == qualified.name
        # The same request again is the same job, though the stored spec was filled in.
        again = await ranks.CreateJob(
            rank_pb2.CreateJobRequest(spec=with_judge(wanting), request_id="weighted")
        )
        assert again.name == job.name

        listed = await evals.ListQualifications(eval_pb2.ListQualificationsRequest())
        assert [q.name for q in listed.qualifications] == [qualified.name, bad.name]
        only = await evals.ListQualifications(
            eval_pb2.ListQualificationsRequest(judge_identity=bad.judge_identity)
        )
        assert [q.name for q in only.qualifications] == [bad.name]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"batch_size": 1}, "batch_size"),
        ({"shuffles": 9}, "shuffles"),
        ({"max_queries": -1}, "max_queries"),
    ],
)
async def test_bad_sizes_name_their_field(server_address: str, files, oracle_judge, fields, field):
    async with grpc.aio.insecure_channel(server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.QualifyJudge(request(files, oracle_judge(), **fields))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in refused.value.details() or field in refused.value.debug_error_string()


async def test_labels_without_two_grades_are_refused(server_address: str, files, oracle_judge):
    files["qrels"].write_text("".join(f"q0 0 c{d:03d} 1\n" for d in range(DOCS_PER_QUERY)))
    async with grpc.aio.insecure_channel(server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.QualifyJudge(request(files, oracle_judge()))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_tierank_qualify_from_the_command_line(tmp_path: Path, files):
    db = str(tmp_path / "cli.db")
    common = ["--qrels", str(files["qrels"]), "--topics", str(files["topics"])]
    common += ["--passages", str(files["passages"]), "--db", db, "--k", "8"]
    good = tierank("qualify", "--judge", "oracle?noise=0.5", *common)
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip().splitlines()[-1].startswith("usable: pair accuracy")
    useless = tierank("qualify", "--judge", "oracle?noise=1000", "--json", *common)
    assert useless.returncode == 5, useless.stderr
    assert json.loads(useless.stdout)["usable"] is False
    listed = tierank("qualifications", "--db", db)
    assert listed.returncode == 0 and len(listed.stdout.strip().splitlines()) == 2
    refused = tierank(
        "rank",
        "--db",
        db,
        "--query",
        "q",
        "--judge",
        "oracle?noise=1000",
        str(Path(__file__).resolve().parents[2] / "examples" / "pool.jsonl"),
    )
    assert refused.returncode == 1 and "allow-unqualified-judges" in refused.stderr


async def test_a_judge_that_cannot_judge_these_passages_names_its_field(
    server_address: str, files, oracle_judge
):
    lines = files["passages"].read_text().splitlines()
    unscored = [json.dumps({**json.loads(line), "metadata": {}}) for line in lines]
    files["passages"].write_text("\n".join(unscored) + "\n")
    async with grpc.aio.insecure_channel(server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.QualifyJudge(request(files, oracle_judge()))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "judge.parameters.options.score_key" in refused.value.details()
