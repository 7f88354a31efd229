"""A judge qualified "not usable" and run anyway (allow_unqualified_judges) is named in every
result: `tierank rank`'s table, JSON and warning, the job's events as `tierank watch` prints
them, and a study's report in each of its outputs (issue 34 item 24)."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import grpc
from fakes import Answer, FakeLLMServer, Recorded, llama_cpp_python, ranking_answer
from job_helpers import llm_judge, tierank
from refused_judges import (
    FLAVOR,
    GGUF,
    qualified_worst,
    serving,
    worst_first,
    worst_first_or_by_score,
)

from tierank.v1 import rank_pb2, study_pb2

# Appended, not put first: "conftest" must stay this directory's for the other tests here.
sys.path.append(str(Path(__file__).resolve().parents[1] / "studies"))

from study_calls import Stubs, started_study, until_final
from study_data import collection, inputs_request

JUDGE = f"{FLAVOR}/qwen"
_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


async def test_rank_names_a_judge_it_was_allowed_to_run_unqualified(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first_or_by_score)
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        "".join(
            json.dumps({"id": f"c{i}", "text": f"passage c{i} has score {9 - i}."}) + "\n"
            for i in range(6)
        )
    )
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen")
        rank = ["rank", str(pool), "--query", "which scores highest", "--judge", f"{FLAVOR}:qwen"]
        rank += ["--k", "3", "--allow-unqualified-judges", "--server", address]

        as_json = await tierank(*rank, "--format", "json")
        assert as_json.returncode == 0, as_json.stderr
        result = json.loads(as_json.stdout)
        assert result["completion_reason"] == "settled"
        (judge,) = result["stats"]["judges"]
        assert judge["admitted_unqualified"] is True
        assert name in judge["admission_note"], judge
        warning = as_json.stderr.strip().splitlines()[-1]
        assert warning.startswith("tierank rank: warning:"), as_json.stderr
        assert f"judge {JUDGE} admitted by allow_unqualified_judges: {name}" in warning

        table = await tierank(*rank)
        assert table.returncode == 0, table.stderr
        summary = table.stdout.strip().splitlines()[-1]
        assert "succeeded (settled)" in summary and name in summary, summary

        watched = await tierank("watch", result["job"], "--server", address)
        lines = watched.stdout.splitlines()
        accepted = next(line for line in lines if " accepted " in line)
        completed = next(line for line in lines if " completed " in line)
        assert name in accepted and name in completed, watched.stdout

        # Without the override the same command is refused, naming the qualification.
        refused = await tierank(*(arg for arg in rank if arg != "--allow-unqualified-judges"))
        assert refused.returncode == 1 and name in refused.stderr, refused.stderr


def by_text(request: Recorded) -> Answer:
    """A judge that reads the passages: a fixed order of their texts, whatever the shown one."""
    shown = _PASSAGE.findall(request.prompt)
    order = sorted(shown, key=lambda found: hashlib.sha256(found[1].encode()).hexdigest())
    return ranking_answer(request, [int(number) for number, _ in order])


async def test_a_study_report_names_a_judge_it_was_allowed_to_run_unqualified(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen")
        fake_llm.respond_with(FLAVOR, by_text)
        ranking = rank_pb2.JobSpec(
            judges=[llm_judge(FLAVOR, "qwen")], batch_size=4, allow_unqualified_judges=True
        )
        spec = study_pb2.StudySpec(depth=4, ranking=ranking)
        data = collection(queries=2, docs=6)
        async with grpc.aio.insecure_channel(address) as channel:
            stubs = Stubs.on(channel)
            study = await started_study(stubs, spec, inputs_request("", data))
            await until_final(stubs, study.name, timeout=60)
            report = await stubs.studies.GetStudyReport(
                study_pb2.GetStudyReportRequest(name=study.name)
            )
        (unqualified,) = report.unqualified_judges
        assert (unqualified.judge, unqualified.queries) == (JUDGE, 2)
        assert name in unqualified.note

        out = tmp_path / "report"
        written = await tierank(
            "study", "report", study.name, "--server", address, "--output-dir", str(out)
        )
        assert f"warning: judge {JUDGE} ran in 2 of 2 queries" in written.stderr, written.stderr
        document = json.loads((out / "report.json").read_text())
        assert document["unqualified_judges"] == [
            {"judge": JUDGE, "note": unqualified.note, "queries": 2}
        ]
        assert "Unqualified judge" in (out / "report.html").read_text()
