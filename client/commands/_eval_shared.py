"""What `tierank eval`, `agree` and `qrels` share: label options, files, the EvalService call."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
from rich import box
from rich.table import Table

from tierank.client._errors import error_from_rpc
from tierank.client._inputs import read_passages, read_qrels, read_run, read_text, read_topics
from tierank.client._names import job_name
from tierank.client._spec import JUDGE_SYNTAX
from tierank.client.commands._shared import (
    UsageError,
    add_server_options,
    judge_argument,
    server_connection,
)
from tierank.v1 import eval_pb2, eval_pb2_grpc

T = TypeVar("T")
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Requests and results of EvalService carry whole files.
LARGE_MESSAGE_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
]
MAPPINGS = ("bands", "levels", "pointwise")


def run_file(path: Path) -> eval_pb2.TextFile:
    """A run as EvalService takes it: read first by the command line's one reader (so that it
    is refused here, as every command refuses it, before any server is reached), then sent by
    content; its path names it in the server's messages."""
    read_run(path)
    return eval_pb2.TextFile(name=str(path), content=read_text(path))


def qrels_file(path: Path) -> eval_pb2.TextFile:
    read_qrels(path)
    return eval_pb2.TextFile(name=str(path), content=read_text(path))


def topics_file(path: Path) -> eval_pb2.TextFile:
    """Topics in any form the one reader takes (TSV or JSONL), sent as the API's
    `qid<TAB>text` lines (a text's own line ends become spaces: a line is one topic there)."""
    lines = [qid + "\t" + text.replace("\n", " ") + "\n" for qid, text in read_topics(path).items()]
    return eval_pb2.TextFile(name=str(path), content="".join(lines))


def passages_file(path: Path) -> eval_pb2.TextFile:
    """Passages in any form the one reader takes (JSONL or TSV), sent as the API's JSONL."""
    lines = (
        json.dumps({"id": p.id, "text": p.text, "metadata": p.metadata}, ensure_ascii=False) + "\n"
        for p in read_passages(path).values()
    )
    return eval_pb2.TextFile(name=str(path), content="".join(lines))


def write_output(path: Path | None, text: str) -> None:
    """`text` to the --output file, or to stdout without one."""
    if path is None:
        sys.stdout.write(text)
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror}") from None


def add_tier_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("labels from tiers")
    group.add_argument(
        "--job",
        dest="jobs",
        action="append",
        default=[],
        metavar="QID=JOB",
        help="a job whose tiers label query QID, e.g. 1037798=jobs/01a2... or 1037798=01a2...;"
        " repeatable",
    )
    add_mapping_options(group, MAPPINGS)
    group.add_argument(
        "--anchor-judge",
        type=judge_argument,
        metavar=JUDGE_SYNTAX,
        help="pointwise judge for --mapping pointwise, e.g. openai:gpt-4.1-mini or"
        " 'oracle?noise=0.5', read as `tierank rank --judge` reads it",
    )
    group.add_argument(
        "--anchor-option",
        dest="anchor_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pointwise judge option, e.g. noise=0.5 or score_key=grade for the oracle; repeatable",
    )
    group.add_argument(
        "--anchor-seed", type=int, default=0, help="seed for the pointwise judge (default 0)"
    )


def add_mapping_options(
    group: argparse._ArgumentGroup,
    mappings: tuple[str, ...] | list[str],
    default: str | None = "bands",
    default_help: str = "bands",
) -> None:
    """How tiers become grades: --mapping, --bands, --below, --levels."""
    group.add_argument(
        "--mapping",
        choices=mappings,
        default=default,
        help=f"tiers to grades: {', '.join(mappings)} (default {default_help})",
    )
    group.add_argument(
        "--bands",
        default="",
        metavar="LAST:GRADE,...",
        help="rank bands for --mapping bands (default 10:3,30:2,100:1: positions 1-10 get 3, ...)",
    )
    group.add_argument("--below", type=int, default=0, help="grade below the last band (default 0)")
    group.add_argument(
        "--levels", type=int, default=4, help="grade levels for --mapping levels (default 4: 0-3)"
    )


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server")
    add_server_options(group)
    group.add_argument("--timeout", type=float, help="give up after this many seconds")


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        pairs.append((key, value))
    return pairs


def _bands(text: str) -> list[eval_pb2.RankBand]:
    bands = []
    for item in filter(None, text.split(",")):
        last, sep, grade = item.partition(":")
        try:
            bands.append(eval_pb2.RankBand(last_position=int(last), grade=int(grade)))
        except ValueError:
            raise UsageError(f"--bands expects LAST:GRADE,..., got {item!r}") from None
        if not sep:
            raise UsageError(f"--bands expects LAST:GRADE,..., got {item!r}")
    return bands


def fixed_mapping(args: argparse.Namespace) -> eval_pb2.TierMapping:
    """The --mapping bands or levels of add_mapping_options (empty for another mapping)."""
    mapping = eval_pb2.TierMapping()
    if args.mapping == "bands":
        mapping.rank_bands.CopyFrom(eval_pb2.RankBands(bands=_bands(args.bands), below=args.below))
    elif args.mapping == "levels":
        mapping.grade_levels.CopyFrom(eval_pb2.GradeLevels(levels=args.levels))
    return mapping


def tier_labels(args: argparse.Namespace) -> eval_pb2.TierLabels:
    jobs = [eval_pb2.JobTiers(query_id=q, job=job_name(j)) for q, j in _pairs(args.jobs, "--job")]
    mapping = fixed_mapping(args)
    if args.mapping == "pointwise":
        if not args.anchor_judge:
            raise UsageError("--mapping pointwise needs --anchor-judge")
        anchor = args.anchor_judge
        anchor.parameters.options.update(_pairs(args.anchor_options, "--anchor-option"))
        mapping.pointwise.CopyFrom(eval_pb2.PointwiseAnchoring(judge=anchor, seed=args.anchor_seed))
    return eval_pb2.TierLabels(jobs=jobs, mapping=mapping)


def call(
    args: argparse.Namespace, method: Callable[[eval_pb2_grpc.EvalServiceStub], Callable[..., T]]
) -> Callable[[object], T]:
    """`call(args, lambda s: s.Evaluate)(request)`: one EvalService call, embedded server if
    no --server; failures raise TierankError (exit 1), as for every subcommand."""

    def send(request: object) -> T:
        with (
            server_connection(args) as connection,
            connection.channel(LARGE_MESSAGE_OPTIONS) as channel,
        ):
            try:
                return method(eval_pb2_grpc.EvalServiceStub(channel))(request, timeout=args.timeout)
            except grpc.RpcError as error:
                raise error_from_rpc(error) from None

    return send


def print_labeling(reports: list[eval_pb2.LabelingReport]) -> None:
    for report in reports:
        line = (
            f"query {report.query_id}: {report.job}, {plural(report.tier_count, 'tier', 'tiers')},"
            f" {plural(report.labeled_documents, 'document', 'documents')} labeled"
        )
        if report.judge_calls:
            line += f", {report.judge_calls} pointwise calls ({report.non_monotone} non-monotone)"
        print(line, file=sys.stderr)


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path by its file name, or by as many trailing parts as make it unique: tables of
    runs stay narrow however deep the runs' directories are."""
    parts = {path: Path(path).parts for path in paths}
    names = {}
    for path in paths:
        for depth in range(1, len(parts[path]) + 1):
            tail = parts[path][-depth:]
            if sum(other[-depth:] == tail for other in parts.values()) == 1:
                names[path] = str(Path(*tail))
                break
        else:
            names[path] = path
    return names


def plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def number(value: float | None) -> str:
    return "NA" if value is None else f"{value:.4f}"


def optional(message: object, field: str) -> float | None:
    return getattr(message, field) if message.HasField(field) else None  # type: ignore[attr-defined]


def confusion_table(confusion: eval_pb2.ConfusionMatrix, corner: str) -> Table:
    """A confusion matrix as a table: one row per row grade, one column per column grade."""
    grades = list(confusion.grades)
    matrix = Table(box=box.SIMPLE_HEAD)
    matrix.add_column(corner, justify="right")
    for grade in grades:
        matrix.add_column(str(grade), justify="right")
    for grade, row in zip(grades, confusion.rows, strict=True):
        matrix.add_row(str(grade), *(str(c) for c in row.counts))
    return matrix
