"""A study over TREC DL19 (topics, the six shared runs, their passages) run with
`provider_batch` through each vendor's batch fake, against the same study call by call with
the same answers: the same tiers for every query, the bill at the batch price (0.5x, from the
price table and the usage the fakes report), and no more provider batches in sequence than the
study's critical path + 2.

By default a slice of DL19 (its first 5 judged queries, pools of depth 8) keeps the suite
fast; TIERANK_BATCH_STUDY_FULL=1 runs the whole target (43 queries, six runs, depth 20).

The fakes answer as a judge that knows the human qrels would (a passage's grade for the
query, ties broken by a hash of its text): a deterministic ranking whatever order the
passages are shown in."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest
from batch_fakes import BATCH_FLAVORS, BATCH_MODELS, FakeBatchServer, judges_config
from fakes import Answer, Recorded, ranking_answer

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2, rank_pb2, study_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))

from shared_data import TREC_DL, require_shared_data
from study_calls import Stubs, started_study, study_jobs, until_final

FULL = os.environ.get("TIERANK_BATCH_STUDY_FULL") == "1"
QUERIES, DEPTH = (43, 20) if FULL else (5, 8)
_QUERY = re.compile(r"^Query: (.*)$", re.MULTILINE)
_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
# A passage shown in a prompt may be cut to its token budget: it is known by its beginning.
_KEY_CHARS = 80


class Dl19:
    def __init__(self, queries: int, depth: int) -> None:
        root = require_shared_data(TREC_DL)
        grades: dict[str, dict[str, int]] = {}
        for line in (root / "qrels.dl19-passage.txt").read_text().splitlines():
            qid, _, doc, grade = line.split()
            grades.setdefault(qid, {})[doc] = int(grade)
        topics = dict(
            line.split("\t", 1)
            for line in (root / "topics.dl19-passage.txt").read_text().splitlines()
        )
        self.qids = sorted(grades)[:queries]
        self.topics = {qid: topics[qid].strip() for qid in self.qids}
        self.grades = grades
        self.runs: dict[str, list[tuple[str, str, float]]] = {}
        pooled: set[str] = set()
        for path in sorted((root / "runs").glob("*.trec")):
            kept: dict[str, int] = {}
            entries = []
            for line in path.read_text().splitlines():
                qid, _, doc, _, score, _ = line.split()
                if qid in self.topics and kept.get(qid, 0) < depth:
                    kept[qid] = kept.get(qid, 0) + 1
                    entries.append((qid, doc, float(score)))
                    pooled.add(doc)
            self.runs[path.name.split(".")[2]] = entries
        self.passages: dict[str, str] = {}
        with (root / "passages" / "dl19-rankllm-union-passages.jsonl").open() as lines:
            for line in lines:
                row = json.loads(line)
                if row["docid"] in pooled:
                    self.passages[row["docid"]] = row["contents"]
        self.qid_of = {text: qid for qid, text in self.topics.items()}
        self.doc_of = {text[:_KEY_CHARS]: doc for doc, text in self.passages.items()}

    def inputs(self) -> study_pb2.AddStudyInputsRequest:
        request = study_pb2.AddStudyInputsRequest(request_id="dl19")
        request.topics.extend(
            study_pb2.StudyTopic(query_id=q, text=t) for q, t in self.topics.items()
        )
        for system, entries in self.runs.items():
            chunk = request.runs.add(system=system)
            chunk.entries.extend(
                study_pb2.RunEntry(query_id=q, doc_id=d, score=s) for q, d, s in entries
            )
        request.passages.extend(
            study_pb2.StudyPassage(doc_id=doc, text=text) for doc, text in self.passages.items()
        )
        return request

    def answer(self, request: Recorded) -> Answer:
        """Best first by the human grade, ties by a hash of the passage's text."""
        qid = self.qid_of[_QUERY.search(request.prompt).group(1).strip()]

        def key(shown: tuple[str, str]) -> tuple[int, str]:
            text = shown[1]
            doc = self.doc_of.get(text[:_KEY_CHARS], "")
            return -self.grades[qid].get(doc, 0), hashlib.sha256(text.encode()).hexdigest()

        shown = sorted(_PASSAGE.findall(request.prompt), key=key)
        return ranking_answer(request, [int(number) for number, _ in shown])


@pytest.fixture(scope="module")
def dl19() -> Dl19:
    return Dl19(QUERIES, DEPTH)


@pytest.fixture
async def fake(dl19: Dl19) -> AsyncIterator[FakeBatchServer]:
    async with FakeBatchServer() as server:
        for flavor in BATCH_FLAVORS:
            server.respond_with(flavor, dl19.answer)
        yield server


async def run_study(
    fake: FakeBatchServer, tmp_path: Path, dl19: Dl19, flavor: str, provider_batch: bool
) -> tuple[study_pb2.Study, dict[str, list[list[str]]], int]:
    """The ended study, each query's tiers (by query id), and its jobs' longest critical path."""
    name = "batch" if provider_batch else "call"
    settings = ServerSettings(
        listen="127.0.0.1:0",
        db=tmp_path / f"{name}.db",
        # A study's first wave gathers its queries as they start: 0.5 s of quiet closes it.
        judges_config=judges_config(fake, tmp_path / f"{name}.json", gather_s=0.5),
        shutdown_grace_s=2.0,
        max_message_mb=64,
    )
    judge = rank_pb2.JudgeSpec(provider=flavor, model=BATCH_MODELS[flavor])
    ranking = rank_pb2.JobSpec(judges=[judge], top_k=10, batch_size=10, seed=3)
    # Rank bands: the subject is the tournaments' calls, by batch and call by call.
    spec = study_pb2.StudySpec(
        depth=DEPTH,
        ranking=ranking,
        provider_batch=provider_batch,
        labels=eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands()),
    )
    async with AsyncExitStack() as running:
        address = await running.enter_async_context(background_server(settings))
        options = [("grpc.max_send_message_length", 64 << 20)]
        channel = await running.enter_async_context(
            grpc.aio.insecure_channel(address, options=options)
        )
        stubs = Stubs.on(channel)
        study = await started_study(stubs, spec, dl19.inputs())
        ended = await until_final(stubs, study.name, timeout=600 if FULL else 120)
        tiers: dict[str, list[list[str]]] = {}
        critical_path = 0
        for job in await study_jobs(stubs, study.name):
            full = await stubs.rank.GetJob(
                rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL)
            )
            tiers[full.spec.query] = [sorted(t.candidate_ids) for t in full.tiers]
            critical_path = max(critical_path, full.stats.critical_path)
    return ended, tiers, critical_path


@pytest.mark.parametrize("flavor", BATCH_FLAVORS)
async def test_a_dl19_study_in_batch_mode_has_the_call_by_call_tiers_at_half_the_cost(
    fake: FakeBatchServer, tmp_path: Path, dl19: Dl19, flavor: str
) -> None:
    by_call, call_tiers, _ = await run_study(fake, tmp_path, dl19, flavor, provider_batch=False)
    assert not fake.batches
    by_batch, batch_tiers, critical_path = await run_study(
        fake, tmp_path, dl19, flavor, provider_batch=True
    )

    for ended in (by_call, by_batch):
        assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
        assert ended.progress.settled + ended.progress.provisional == len(dl19.qids)
    assert batch_tiers == call_tiers and len(batch_tiers) == len(dl19.qids)
    assert by_batch.progress.judge_calls == by_call.progress.judge_calls
    ratio = by_batch.progress.usage.cost_usd / by_call.progress.usage.cost_usd
    assert ratio == pytest.approx(0.5, rel=1e-6)
    batches = sorted(fake.batches.values(), key=lambda b: b.id)
    submitted = [r.prompt for b in batches for _, r in b.entries]
    assert len(submitted) == len(set(submitted)) == by_batch.progress.judge_calls
    # One batch per wave: no more in sequence than the slowest query's rounds, plus 2.
    assert len(batches) <= critical_path + 2, (len(batches), critical_path)
    print(
        f"{flavor}: {len(dl19.qids)} queries, depth {DEPTH}: {by_batch.progress.judge_calls} calls,"
        f" {len(batches)} batches in sequence, critical path {critical_path},"
        f" cost ${by_call.progress.usage.cost_usd:.4f} call by call,"
        f" ${by_batch.progress.usage.cost_usd:.4f} in batches ({ratio:.3f}x)"
    )
