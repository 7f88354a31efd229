"""`tierank eval`: score runs against qrels or against jobs' tiers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from tierank import limits
from tierank.client.commands._eval_shared import (
    add_connection_options,
    add_tier_options,
    call,
    number,
    optional,
    print_labeling,
    qrels_file,
    run_file,
    short_names,
    tier_labels,
)
from tierank.client.commands._shared import (
    EXIT_NOTHING_MEASURED,
    EXIT_OK,
    UsageError,
    table_console,
)
from tierank.v1 import eval_pb2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="score runs against qrels or a job's tiers",
        description="Score one or more TREC runs with ir-measures names (nDCG@10, "
        "RR(rel=2)@10, AP(rel=2), R(rel=2)@100, ...) against a qrels file or against the tiers "
        "of jobs (one job per query, --job QID=JOB).",
        epilog=f"Exit status {EXIT_NOTHING_MEASURED}, with a warning on stderr: a run was"
        " measured on no query (it shares none with the labels).",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="TREC run files")
    parser.add_argument("--qrels", type=Path, help="qrels file (qid iter docid grade)")
    parser.add_argument(
        "-m",
        "--measure",
        dest="measures",
        action="append",
        default=[],
        help=f"a measure, repeatable (default {limits.DEFAULT_MEASURE})",
    )
    parser.add_argument(
        "--all-queries",
        action="store_true",
        help="score every labeled query; one missing from a run scores 0 (trec_eval -c)",
    )
    parser.add_argument(
        "--max-docs", type=int, default=0, help="only each query's top N documents (trec_eval -M)"
    )
    parser.add_argument(
        "--na-as-zero",
        action="store_true",
        help="score undefined values as 0, as trec_eval averages do",
    )
    parser.add_argument("--per-query", action="store_true", help="also show per-query values")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_tier_options(parser)
    add_connection_options(parser)
    parser.set_defaults(handler=run)


def labels_from_args(args: argparse.Namespace) -> eval_pb2.LabelSource:
    if (args.qrels is None) == (not args.jobs):
        raise UsageError("give labels with either --qrels or --job QID=JOB")
    if args.qrels is not None:
        return eval_pb2.LabelSource(qrels=qrels_file(args.qrels))
    return eval_pb2.LabelSource(tiers=tier_labels(args))


def run(args: argparse.Namespace) -> int:
    request = eval_pb2.EvaluateRequest(
        runs=[run_file(path) for path in args.runs],
        labels=labels_from_args(args),
        measures=args.measures,
        all_queries=args.all_queries,
        max_docs=args.max_docs,
        na_as_zero=args.na_as_zero,
        per_query=args.per_query,
    )
    response = call(args, lambda stub: stub.Evaluate)(request)
    print_labeling(list(response.labeling))
    if args.json:
        json.dump(as_json(response), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_tables(response)
    unmeasured = [e.run for e in response.runs if not any(a.count + a.na for a in e.aggregates)]
    for run_name in unmeasured:
        print(
            f"tierank eval: warning: nothing measured for {run_name}: none of its queries is"
            " labeled (the run and the labels share no query id)",
            file=sys.stderr,
        )
    return EXIT_NOTHING_MEASURED if unmeasured else EXIT_OK


def as_json(response: eval_pb2.EvaluateResponse) -> dict[str, Any]:
    runs = []
    for evaluation in response.runs:
        entry: dict[str, Any] = {
            "run": evaluation.run,
            "measures": {
                a.measure: {"mean": optional(a, "mean"), "count": a.count, "na": a.na}
                for a in evaluation.aggregates
            },
        }
        if evaluation.per_query:
            per_query: dict[str, dict[str, float | None]] = {}
            for value in evaluation.per_query:
                per_query.setdefault(value.measure, {})[value.query_id] = optional(value, "value")
            entry["per_query"] = per_query
        runs.append(entry)
    return {"runs": runs}


def print_tables(response: eval_pb2.EvaluateResponse) -> None:
    console = table_console()
    measures = [a.measure for a in response.runs[0].aggregates] if response.runs else []
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("run", no_wrap=True)
    for measure in measures:
        table.add_column(measure, justify="right", no_wrap=True)
    table.add_column("queries", justify="right")
    names = short_names([evaluation.run for evaluation in response.runs])
    for evaluation in response.runs:
        aggregates = list(evaluation.aggregates)
        table.add_row(
            names[evaluation.run],
            *(number(optional(a, "mean")) for a in aggregates),
            str(aggregates[0].count + aggregates[0].na) if aggregates else "0",
        )
    console.print(table)
    for evaluation in response.runs:
        if not evaluation.per_query:
            continue
        detail = Table(title=names[evaluation.run], box=box.SIMPLE_HEAD, title_justify="left")
        for column in ("measure", "query", "value"):
            detail.add_column(column, no_wrap=True)
        for value in evaluation.per_query:
            detail.add_row(value.measure, value.query_id, number(optional(value, "value")))
        console.print(detail)
