"""A small synthetic collection for studies: topics, three systems' runs of known quality,
passages whose hidden grade the `oracle` judge reads (metadata "score"), and the human qrels
it comes from."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tierank.v1 import eval_pb2, rank_pb2, study_pb2


@dataclass(frozen=True)
class Collection:
    topics: dict[str, str]
    grades: dict[str, dict[str, int]]  # qid -> doc -> grade
    runs: dict[str, dict[str, dict[str, float]]]  # system -> qid -> doc -> score
    passages: dict[str, str]


def collection(queries: int = 6, docs: int = 30, seed: int = 7) -> Collection:
    """Systems `good`, `fair`, `poor`: each ranks by the hidden grade plus noise of its own size,
    so the true order of the systems is known."""
    rng = random.Random(seed)
    topics, grades, passages = {}, {}, {}
    runs: dict[str, dict[str, dict[str, float]]] = {"good": {}, "fair": {}, "poor": {}}
    noise = {"good": 0.3, "fair": 1.2, "poor": 5.0}
    for q in range(queries):
        qid = f"q{q}"
        topics[qid] = f"topic number {q}"
        grades[qid] = {}
        for d in range(docs):
            doc = f"{qid}-d{d}"
            grades[qid][doc] = rng.choice([0, 0, 0, 1, 1, 2, 3])
            passages[doc] = f"passage {d} of topic {q}"
        for system, sigma in noise.items():
            runs[system][qid] = {
                doc: grade + rng.gauss(0, sigma) for doc, grade in grades[qid].items()
            }
    return Collection(topics, grades, runs, passages)


def inputs_request(
    study: str, data: Collection, request_id: str = "all", human: bool = False
) -> study_pb2.AddStudyInputsRequest:
    request = study_pb2.AddStudyInputsRequest(study=study, request_id=request_id)
    request.topics.extend(study_pb2.StudyTopic(query_id=q, text=t) for q, t in data.topics.items())
    for system, run in data.runs.items():
        chunk = request.runs.add(system=system)
        for qid, scores in run.items():
            chunk.entries.extend(
                study_pb2.RunEntry(query_id=qid, doc_id=doc, score=score)
                for doc, score in scores.items()
            )
    grade_of = {
        doc: grade for per_query in data.grades.values() for doc, grade in per_query.items()
    }
    request.passages.extend(
        study_pb2.StudyPassage(doc_id=doc, text=text, metadata={"score": str(grade_of[doc])})
        for doc, text in data.passages.items()
    )
    if human:
        request.human_qrels.extend(
            study_pb2.HumanJudgment(query_id=qid, doc_id=doc, grade=grade)
            for qid, per_query in data.grades.items()
            for doc, grade in per_query.items()
        )
    return request


# Labels as rank bands: for the tests whose subject is the tournaments' own calls (an oracle
# judge can grade, so a study would otherwise add pointwise probes to every count).
RANK_BANDS = eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands())


def oracle_ranking(
    noise: float = 0.0, latency_ms: float = 0.0, **fields: object
) -> rank_pb2.JobSpec:
    """Ranked by the `oracle` judge (its calls `latency_ms` long each)."""
    options = {"noise": str(noise)}
    if latency_ms:
        options["latency_ms"] = str(latency_ms)
    judge = rank_pb2.JudgeSpec(
        provider="oracle",
        model="hidden-grade",
        parameters=rank_pb2.JudgeParameters(options=options),
    )
    return rank_pb2.JobSpec(judges=[judge], **fields)  # type: ignore[arg-type]


def without(data: Collection, *systems: str) -> Collection:
    """The collection without these systems' runs (to be added to a study later)."""
    runs = {system: run for system, run in data.runs.items() if system not in systems}
    return Collection(data.topics, data.grades, runs, data.passages)


def run_request(
    study: str, data: Collection, system: str, request_id: str
) -> study_pb2.AddStudyInputsRequest:
    """One system's run alone, as a chunk for a study that has ended."""
    request = study_pb2.AddStudyInputsRequest(study=study, request_id=request_id)
    chunk = request.runs.add(system=system)
    for qid, scores in data.runs[system].items():
        chunk.entries.extend(
            study_pb2.RunEntry(query_id=qid, doc_id=doc, score=score)
            for doc, score in scores.items()
        )
    return request
