"""`tierank fill`: grade the holes of a qrels file (unjudged documents in runs' tops) with a
pointwise judge, and report how that judge agrees with the human grades beside them."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from tierank import limits
from tierank.client._console import Console
from tierank.client._inputs import read_rubric
from tierank.client._render import fit_console
from tierank.client._spec import JUDGE_SYNTAX
from tierank.client.commands._admin import print_json
from tierank.client.commands._eval_shared import (
    add_connection_options,
    confusion_table,
    number,
    optional,
    passages_file,
    plural,
    qrels_file,
    run_file,
    topics_file,
    write_output,
)
from tierank.client.commands._operations import run_operation
from tierank.client.commands._shared import (
    EXIT_NO_VERDICTS,
    EXIT_OK,
    EXIT_PROVISIONAL,
    EXIT_SERVER_ERROR,
    EXIT_USAGE,
    UsageError,
    add_rubric_option,
    judge_argument,
    positive_int,
)
from tierank.v1 import eval_pb2

FORMATS = ("text", "json")
DEFAULT_HELD_IN = 200
EXIT_STATUS_HELP = (
    f"exit status: {EXIT_OK} every hole was graded; {EXIT_SERVER_ERROR} a server or connection"
    f" error; {EXIT_USAGE} a usage error; {EXIT_NO_VERDICTS} there were holes and the judge"
    f" graded none of them; {EXIT_PROVISIONAL} some holes could not be graded and are still"
    f" holes. {EXIT_NO_VERDICTS} and {EXIT_PROVISIONAL} print a warning on stderr and still"
    " write the qrels."
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fill",
        help="grade the unjudged documents in runs' tops and add them to a qrels file",
        description="Fill the holes of a qrels file: every document in the top --depth of a"
        " --run that the qrels do not judge is graded 0-3 by a pointwise judge (UMBRELA-style"
        " prompt, verdict cache, the tenant's limits) and appended. Beside the holes, up to"
        " --held-in documents the qrels do judge, from the same tops, are graded too, and the"
        " judge's agreement with their human grades is reported (kappa, weighted kappa,"
        " binary agreement at grade >= 2 with its 95% interval, confusion matrix); their"
        " grades are not added. The filled qrels go to stdout or --output, the report to"
        " stderr (--format json: to stdout, with the qrels in --output). Filled grades can"
        " favour or penalise runs that retrieve the holes: see docs/evaluation.md.",
        epilog=EXIT_STATUS_HELP,
    )
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument(
        "--qrels", type=Path, required=True, help="human qrels with holes (qid iter docid grade)"
    )
    inputs.add_argument(
        "--run",
        dest="runs",
        action="append",
        type=Path,
        required=True,
        help="a TREC run whose top --depth documents are graded where unjudged; repeatable",
    )
    inputs.add_argument(
        "--topics", type=Path, required=True, help="query texts: qid<TAB>text per line, or JSONL"
    )
    inputs.add_argument(
        "--passages",
        type=Path,
        required=True,
        help='passage texts: JSONL ({"id","text","metadata"?} or {"docid","contents"}) or'
        " docid<TAB>text",
    )

    judging = parser.add_argument_group("judging")
    judging.add_argument(
        "--judge",
        type=judge_argument,
        required=True,
        metavar=JUDGE_SYNTAX,
        help="the pointwise judge, read as `tierank rank --judge` reads it, e.g."
        " openai:gpt-4.1-mini or 'oracle?noise=0.5&score_key=grade'",
    )
    judging.add_argument(
        "--depth",
        type=positive_int,
        default=limits.DEFAULT_FILL_DEPTH,
        help=f"grade the holes in each run's top N per query (default {limits.DEFAULT_FILL_DEPTH})",
    )
    add_rubric_option(judging)
    judging.add_argument(
        "--held-in",
        type=_non_negative_int,
        default=DEFAULT_HELD_IN,
        metavar="N",
        help="also grade up to N human-judged pairs from the same tops and report the judge's"
        f" agreement with them; 0: none (default {DEFAULT_HELD_IN},"
        f" at most {limits.MAX_HELD_IN_SAMPLE})",
    )
    judging.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for the judge's calls and the held-in sample (default 0)",
    )
    judging.add_argument(
        "--max-in-flight",
        type=positive_int,
        help=f"judge calls in flight (at most {limits.MAX_IN_FLIGHT},"
        f" server default {limits.DEFAULT_OPERATION_MAX_IN_FLIGHT})",
    )

    output = parser.add_argument_group("output")
    output.add_argument("--output", type=Path, help="write the filled qrels here, not to stdout")
    output.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="report as text on stderr, or as JSON on stdout (needs --output) (default text)",
    )
    add_connection_options(parser)
    parser.set_defaults(handler=run)


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return value


def run(args: argparse.Namespace) -> int:
    if args.format == "json" and args.output is None:
        raise UsageError("--format json writes the report to stdout: give the qrels --output")
    request = eval_pb2.FillQrelsRequest(
        qrels=qrels_file(args.qrels),
        runs=[run_file(path) for path in args.runs],
        depth=args.depth,
        topics=topics_file(args.topics),
        passages=passages_file(args.passages),
        judge=args.judge,
        rubric=read_rubric(args.rubric),
        seed=args.seed,
        max_in_flight=args.max_in_flight,
        held_in_sample=args.held_in,
    )
    response = run_operation(
        args, "fill", lambda client: client.start_fill_qrels(request, timeout=args.timeout)
    ).fill
    write_output(args.output, response.qrels)
    if args.format == "json":
        print_json(as_json(response, args))
    else:
        print_report(response, args)
    failed = sum(bool(g.failure_reason) for g in response.added)
    if not failed:
        return EXIT_OK
    first = next(g for g in response.added if g.failure_reason)
    example = f"{first.query_id} {first.doc_id}: {first.failure_reason}"
    if failed == len(response.added):
        print(
            f"tierank fill: warning: the judge graded none of {plural(failed, 'hole', 'holes')}"
            f" (e.g. {example}); the qrels are written unfilled",
            file=sys.stderr,
        )
        return EXIT_NO_VERDICTS
    print(
        f"tierank fill: warning: {plural(failed, 'hole', 'holes')} of {len(response.added)}"
        f" could not be graded and are still holes (e.g. {example})",
        file=sys.stderr,
    )
    return EXIT_PROVISIONAL


def _grades_by_query(
    added: list[eval_pb2.PairGrade],
) -> dict[str, tuple[Counter[int], int]]:
    """Per query, in the order the server gave: the new grades' counts and the failures."""
    by_query: dict[str, tuple[Counter[int], int]] = {}
    for grade in added:
        counts, failed = by_query.get(grade.query_id, (Counter(), 0))
        if grade.failure_reason:
            failed += 1
        else:
            counts[grade.grade] += 1
        by_query[grade.query_id] = (counts, failed)
    return by_query


def as_json(response: eval_pb2.FillQrelsResponse, args: argparse.Namespace) -> dict[str, Any]:
    stats = response.stats
    by_query = _grades_by_query(list(response.added))
    result: dict[str, Any] = {
        "output": str(args.output),
        "depth": args.depth,
        "holes": len(response.added),
        "filled": sum(not g.failure_reason for g in response.added),
        "per_query": {
            qid: {"grades": {str(g): n for g, n in sorted(counts.items())}, "failed": failed}
            for qid, (counts, failed) in by_query.items()
        },
        "failures": [
            {"query_id": g.query_id, "doc_id": g.doc_id, "reason": g.failure_reason}
            for g in response.added
            if g.failure_reason
        ],
        "stats": {
            "calls": stats.calls,
            "cached_calls": stats.cached_calls,
            "failed_calls": stats.failed_calls,
            "input_tokens": stats.usage.input_tokens,
            "output_tokens": stats.usage.output_tokens,
            "cost_usd": stats.usage.cost_usd,
        },
        "held_in": None,
    }
    if response.HasField("held_in"):
        held_in = response.held_in
        binary = held_in.binary_agreement
        result["held_in"] = {
            "asked": args.held_in,
            "pairs": held_in.pairs,
            "kappa": optional(held_in, "kappa"),
            "quadratic_weighted_kappa": optional(held_in, "quadratic_weighted_kappa"),
            "binary_agreement": {
                "value": binary.value,
                "low": binary.low,
                "high": binary.high,
                "count": binary.count,
                "total": binary.total,
            }
            if held_in.HasField("binary_agreement")
            else None,
            "confusion": {
                "grades": list(held_in.confusion.grades),
                "rows": [list(row.counts) for row in held_in.confusion.rows],
            },
        }
    return result


def print_report(response: eval_pb2.FillQrelsResponse, args: argparse.Namespace) -> None:
    console = fit_console(Console(stderr=True, highlight=False), on_terminal=sys.stderr.isatty())
    added = list(response.added)
    filled = sum(not g.failure_reason for g in added)
    where = f"the top {args.depth} of {plural(len(args.runs), 'run', 'runs')}"
    by_query = _grades_by_query(added)
    console.print(
        f"filled {filled} of {plural(len(added), 'hole', 'holes')} in {where}"
        f" ({plural(len(by_query), 'query', 'queries')})"
    )
    if by_query:
        grades = sorted({g for counts, _ in by_query.values() for g in counts})
        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("query", no_wrap=True)
        for column in ("holes", *(f"grade {g}" for g in grades), "failed"):
            table.add_column(column, justify="right")
        total: Counter[int] = Counter()
        for qid, (counts, failed) in by_query.items():
            total.update(counts)
            holes = sum(counts.values()) + failed
            table.add_row(qid, str(holes), *(str(counts[g]) for g in grades), str(failed))
        table.add_row(
            "all", str(len(added)), *(str(total[g]) for g in grades), str(len(added) - filled)
        )
        console.print(table)
    stats = response.stats
    console.print(
        f"judge calls: {stats.calls} ({stats.cached_calls} cached, {stats.failed_calls} failed),"
        f" {stats.usage.input_tokens} input and {stats.usage.output_tokens} output tokens,"
        f" ${stats.usage.cost_usd:.4f}"
    )
    if response.HasField("held_in"):
        _print_held_in(console, response.held_in, args.held_in)


def _print_held_in(console: Console, held_in: eval_pb2.HeldInAgreement, asked: int) -> None:
    if not held_in.pairs:
        console.print(
            "held-in: no human-judged pair with texts in these tops was graded; the filled"
            " grades come with no evidence of agreement"
        )
        return
    binary = held_in.binary_agreement
    console.print(
        f"held-in agreement on {held_in.pairs} human-judged pairs from the same tops"
        f" ({asked} asked for; graded beside the holes, not added):\n"
        f"  binary (grade >= 2) {binary.value:.3f} [{binary.low:.3f}, {binary.high:.3f}]"
        f" ({binary.count}/{binary.total}), kappa {number(optional(held_in, 'kappa'))},"
        f" quadratic weighted kappa {number(optional(held_in, 'quadratic_weighted_kappa'))}"
    )
    console.print("  confusion matrix (rows: human grade, columns: judge's grade)")
    console.print(confusion_table(held_in.confusion, "human \\ judge"))
