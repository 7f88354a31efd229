"""tierank/limits.py is the one owner of the API's bounds and defaults: no other module
declares one of its names again, and the docs state them as it declares them, so that a number
changed in one place and not the other fails here. The .proto comments count as docs (every
client's generated code and reference shows them); each is read from its own field."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tierank import limits

ROOT = Path(__file__).resolve().parent.parent


def kib(size: int) -> str:
    assert size % 1024 == 0, f"{size} bytes is no whole number of KiB"
    return f"{size // 1024} KiB"


def days(seconds: int) -> str:
    assert seconds % 86_400 == 0, f"{seconds} s is no whole number of days"
    return f"{seconds:,} ({seconds // 86_400} days)"


def normalized(text: str) -> str:
    """Runs of white space as one space: docs wrap their lines anywhere."""
    return " ".join(text.split())


# (document, what it says), in the words of the document.
PROSE = [
    (
        "README.md",
        f"`--k` (batch size, {limits.MIN_BATCH_SIZE}–{limits.MAX_BATCH_SIZE},"
        f" default {limits.DEFAULT_BATCH_SIZE})",
    ),
    (
        "README.md",
        f"fewer than {limits.MIN_CANDIDATES} or more than **{limits.MAX_CANDIDATES:,}** candidates",
    ),
    ("README.md", f"k outside {limits.MIN_BATCH_SIZE}–{limits.MAX_BATCH_SIZE}"),
    (
        "README.md",
        f"{limits.MAX_CANDIDATES:,} candidates; ids {limits.MAX_ID_BYTES} bytes;"
        f" query {kib(limits.MAX_QUERY_BYTES)}; rubric {kib(limits.MAX_RUBRIC_BYTES)};"
        f" `request_id` {limits.MAX_REQUEST_ID_BYTES} bytes; {limits.MAX_JUDGES} judges,"
        f" each with a name of {limits.MAX_JUDGE_NAME_BYTES} and a model of"
        f" {limits.MAX_MODEL_BYTES} bytes, at most {limits.MAX_JUDGE_OPTIONS} options"
        f" (names {limits.MAX_OPTION_KEY_BYTES}, values {limits.MAX_OPTION_VALUE_BYTES} bytes),"
        f" `weight` {limits.MIN_WEIGHT:g}–{limits.MAX_WEIGHT:g}",
    ),
    ("README.md", f"`deadline_seconds` at most {days(limits.MAX_DEADLINE_SECONDS)}"),
    ("README.md", f"At most {limits.MAX_WATCHERS_PER_JOB} watch streams per job"),
    ("README.md", f"`GradePairs` of up to {limits.MAX_PAIRS:,} pairs"),
    (
        "README.md",
        f"a tenant runs at most {limits.MAX_EVAL_REQUESTS_PER_TENANT} of them at once per server",
    ),
    ("docs/rubrics.md", f"A job's query holds at most {kib(limits.MAX_QUERY_BYTES)}"),
    ("docs/evaluation.md", f"the top `--depth` (default {limits.DEFAULT_FILL_DEPTH})"),
    ("docs/evaluation.md", f"with cutoffs @K up to {limits.MAX_MEASURE_CUTOFF:,}"),
    (
        "docs/studies.md",
        f"at most {limits.MAX_STUDY_MEASURES} measures, with cutoffs @K up to"
        f" {limits.MAX_MEASURE_CUTOFF:,}; a deadline of at most"
        f" {limits.MAX_DEADLINE_SECONDS:,} seconds ({limits.MAX_DEADLINE_SECONDS // 86_400} days,",
    ),
    (
        "docs/studies.md",
        f"passages of up to {kib(limits.MAX_PASSAGE_BYTES)}; ids of up to"
        f" {limits.MAX_ID_BYTES} bytes",
    ),
    (
        "docs/studies.md",
        f"grades {limits.MIN_GRADE}–{limits.MAX_GRADE} in a human sample,"
        f" −{-limits.MIN_HUMAN_GRADE}–{limits.MAX_HUMAN_GRADE} in human qrels",
    ),
    ("docs/providers.md", f"the quorum (default {limits.DEFAULT_QUORUM})"),
    (
        "docs/studies.md",
        f"At most `--max-live` queries (default {limits.DEFAULT_LIVE_QUERIES};"
        f" {limits.DEFAULT_BATCH_LIVE_QUERIES} with `--provider-batch`;"
        f" at most {limits.MAX_LIVE_QUERIES})",
    ),
]

RANK_PROTO = "proto/tierank/v1/rank.proto"
EVAL_PROTO = "proto/tierank/v1/eval.proto"
STUDY_PROTO = "proto/tierank/v1/study.proto"
OPERATION_IN_FLIGHT = (
    f"default {limits.DEFAULT_OPERATION_MAX_IN_FLIGHT}, range 1..{limits.MAX_IN_FLIGHT}."
)
# (file, message, field, what the field's comment says).
PROTO_COMMENTS = [
    (
        RANK_PROTO,
        "JobSpec",
        "batch_size",
        f"Default {limits.DEFAULT_BATCH_SIZE},"
        f" range {limits.MIN_BATCH_SIZE}..{limits.MAX_BATCH_SIZE}.",
    ),
    (
        RANK_PROTO,
        "JobSpec",
        "max_in_flight",
        f"Default {limits.DEFAULT_JOB_MAX_IN_FLIGHT}, range 1..{limits.MAX_IN_FLIGHT}.",
    ),
    (RANK_PROTO, "JobSpec", "quorum", f"Default {limits.DEFAULT_QUORUM}."),
    (RANK_PROTO, "JobSpec", "deadline_seconds", f"at most {days(limits.MAX_DEADLINE_SECONDS)}."),
    (
        RANK_PROTO,
        "ListJobsRequest",
        "page_size",
        f"Default {limits.DEFAULT_PAGE_SIZE}, maximum {limits.MAX_JOBS_PAGE_SIZE}.",
    ),
    (EVAL_PROTO, "GradePairsRequest", "max_in_flight", OPERATION_IN_FLIGHT),
    (EVAL_PROTO, "FillQrelsRequest", "max_in_flight", OPERATION_IN_FLIGHT),
    (EVAL_PROTO, "QualifyJudgeRequest", "max_in_flight", OPERATION_IN_FLIGHT),
    (EVAL_PROTO, "GradePairsRequest", "pairs", f"At most {limits.MAX_PAIRS:,}."),
    (EVAL_PROTO, "FillQrelsRequest", "depth", f"0 means {limits.DEFAULT_FILL_DEPTH}."),
    (EVAL_PROTO, "FillQrelsRequest", "held_in_sample", f"at most {limits.MAX_HELD_IN_SAMPLE:,}."),
    (EVAL_PROTO, "EvaluateRequest", "measures", f"Empty: {limits.DEFAULT_MEASURE}."),
    (EVAL_PROTO, "CompareLabelsRequest", "measure", f"empty means {limits.DEFAULT_MEASURE}."),
    (
        EVAL_PROTO,
        "CompareLabelsRequest",
        "rbo_persistence",
        f"0 means {limits.DEFAULT_RBO_PERSISTENCE}.",
    ),
    (
        EVAL_PROTO,
        "CompareLabelsRequest",
        "relevance_threshold",
        f"0 means {limits.DEFAULT_RELEVANCE_THRESHOLD}",
    ),
    (
        EVAL_PROTO,
        "QualifyJudgeRequest",
        "batch_size",
        f"0 means {limits.DEFAULT_BATCH_SIZE} ({limits.MIN_BATCH_SIZE}..{limits.MAX_BATCH_SIZE}).",
    ),
    (
        EVAL_PROTO,
        "QualifyJudgeRequest",
        "shuffles",
        f"({limits.MIN_SHUFFLES}..{limits.MAX_SHUFFLES}; 0 means {limits.DEFAULT_SHUFFLES})",
    ),
    (
        EVAL_PROTO,
        "QualifyJudgeRequest",
        "max_queries",
        f"0 means {limits.DEFAULT_QUALIFY_QUERIES} (1..{limits.MAX_QUALIFY_QUERIES}).",
    ),
    (
        EVAL_PROTO,
        "QualifyJudgeRequest",
        "batches_per_query",
        f"0 means {limits.DEFAULT_BATCHES_PER_QUERY} (1..{limits.MAX_BATCHES_PER_QUERY}).",
    ),
    (
        EVAL_PROTO,
        "QualifyJudgeRequest",
        "relevance_threshold",
        f"0 means {limits.DEFAULT_RELEVANCE_THRESHOLD}.",
    ),
    (
        EVAL_PROTO,
        "ListQualificationsRequest",
        "page_size",
        f"Default {limits.DEFAULT_PAGE_SIZE}, at most {limits.MAX_QUALIFICATIONS_PAGE_SIZE}.",
    ),
    (
        EVAL_PROTO,
        "ListOperationsRequest",
        "page_size",
        f"Default {limits.DEFAULT_PAGE_SIZE}, at most {limits.MAX_OPERATIONS_PAGE_SIZE}.",
    ),
    (
        STUDY_PROTO,
        "StudySpec",
        "max_live_queries",
        f"Default {limits.DEFAULT_LIVE_QUERIES}, 1..{limits.MAX_LIVE_QUERIES}. With provider_batch"
        f" the default is {limits.DEFAULT_BATCH_LIVE_QUERIES}, the maximum",
    ),
    (
        STUDY_PROTO,
        "StudySpec",
        "deadline_seconds",
        f"at most {days(limits.MAX_DEADLINE_SECONDS)}.",
    ),
    (
        STUDY_PROTO,
        "ExtendStudyRequest",
        "deadline_seconds",
        f"at most {days(limits.MAX_DEADLINE_SECONDS)}.",
    ),
    (
        STUDY_PROTO,
        "StudySpec",
        "measures",
        f"Cutoffs @K from 1 to {limits.MAX_MEASURE_CUTOFF:,}.",
    ),
    (STUDY_PROTO, "StudyPassage", "text", f"at most {kib(limits.MAX_PASSAGE_BYTES)}"),
    (
        STUDY_PROTO,
        "AddStudyInputsRequest",
        "human_qrels",
        f"(grades {limits.MIN_HUMAN_GRADE} to {limits.MAX_HUMAN_GRADE})",
    ),
    (
        STUDY_PROTO,
        "AddStudyInputsRequest",
        "human_sample",
        f"({limits.MIN_GRADE}-{limits.MAX_GRADE}, the study's scale)",
    ),
]


def field_comment(proto: str, message: str, field: str) -> str:
    """The comment lines right above `field`'s declaration in `message` (not nested ones)."""
    body = re.search(rf"^message {message} \{{\n(.*?)^\}}", proto, re.MULTILINE | re.DOTALL)
    assert body, f"no message {message}"
    lines = body.group(1).splitlines()
    declaration = re.compile(rf"^  (optional |repeated )?[\w.]+ {field} = \d+;")
    at = next((i for i, line in enumerate(lines) if declaration.match(line)), None)
    assert at is not None, f"no field {field} in {message}"
    comment: list[str] = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("//"):
            break
        comment.insert(0, line.strip().removeprefix("//"))
    return normalized(" ".join(comment))


@pytest.mark.parametrize("document, says", PROSE, ids=[f"{d}: {s[:40]}" for d, s in PROSE])
def test_the_docs_state_the_limits_module_s_bounds_and_defaults(document: str, says: str):
    text = normalized((ROOT / document).read_text())
    assert normalized(says) in text, (
        f"{document} no longer says {says!r}: change it and tierank/limits.py together"
    )


@pytest.mark.parametrize(
    "proto, message, field, says",
    PROTO_COMMENTS,
    ids=[f"{m}.{f}" for _, m, f, _ in PROTO_COMMENTS],
)
def test_the_proto_comments_state_the_limits_module_s_bounds_and_defaults(
    proto: str, message: str, field: str, says: str
):
    comment = field_comment((ROOT / proto).read_text(), message, field)
    assert says in comment, (
        f"{message}.{field} says {comment!r}, not {says!r}: change {proto} and "
        "tierank/limits.py together"
    )


DECLARED = {name for name in vars(limits) if name.isupper()}


@pytest.mark.parametrize(
    "path",
    sorted(p for part in ("server", "client", "scheduler") for p in (ROOT / part).rglob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_module_declares_a_bound_of_the_limits_module_again(path: Path):
    assigned = {
        target.id
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert not assigned & DECLARED, f"declared in tierank/limits.py: {sorted(assigned & DECLARED)}"
