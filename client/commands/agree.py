"""`tierank agree`: compare two label sets, and the system orderings they induce."""

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
    confusion_table,
    number,
    optional,
    plural,
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
        "agree",
        help="compare two label sets (kappa) and the system orderings they give (tau, RBO)",
        description="Compare label set A (the first --qrels) with label set B (a second "
        "--qrels, or the tiers of --job QID=JOB): Cohen's kappa, weighted kappa and the "
        "confusion matrix over the pairs both label. With runs, also score each run under A "
        "and under B (on the queries both label) and compare the two system orderings: "
        "Kendall's tau-b, Spearman's rho, and RBO (extrapolated, and its lower bound).",
        epilog=f"Exit status {EXIT_NOTHING_MEASURED}, with a warning on stderr: the two label"
        " sets share no pair, so no agreement was measured.",
    )
    parser.add_argument(
        "runs", nargs="*", type=Path, help="TREC run files whose system orderings are compared"
    )
    parser.add_argument(
        "--qrels",
        action="append",
        type=Path,
        default=[],
        help="a qrels file; the first is label set A, a second one label set B",
    )
    parser.add_argument(
        "-m",
        "--measure",
        default=limits.DEFAULT_MEASURE,
        help=f"measure ordering the systems (default {limits.DEFAULT_MEASURE})",
    )
    parser.add_argument(
        "--threshold",
        type=int,
        default=limits.DEFAULT_RELEVANCE_THRESHOLD,
        help="binary kappa: relevant when grade >= this"
        f" (default {limits.DEFAULT_RELEVANCE_THRESHOLD}, TREC DL's convention)",
    )
    parser.add_argument(
        "--persistence",
        type=float,
        default=limits.DEFAULT_RBO_PERSISTENCE,
        help=f"RBO persistence p (default {limits.DEFAULT_RBO_PERSISTENCE})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_tier_options(parser)
    add_connection_options(parser)
    parser.set_defaults(handler=run)


def _label_sets(args: argparse.Namespace) -> tuple[eval_pb2.LabelSource, eval_pb2.LabelSource]:
    sources = [eval_pb2.LabelSource(qrels=qrels_file(path)) for path in args.qrels]
    if args.jobs:
        sources.append(eval_pb2.LabelSource(tiers=tier_labels(args)))
    if len(sources) != 2:
        raise UsageError("give exactly two label sets: two --qrels, or one --qrels and --job")
    return sources[0], sources[1]


def run(args: argparse.Namespace) -> int:
    a, b = _label_sets(args)
    request = eval_pb2.CompareLabelsRequest(
        a=a,
        b=b,
        relevance_threshold=args.threshold,
        runs=[run_file(path) for path in args.runs],
        measure=args.measure,
        rbo_persistence=args.persistence,
    )
    response = call(args, lambda stub: stub.CompareLabels)(request)
    print_labeling(list(response.labeling))
    if args.json:
        json.dump(as_json(response), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(response)
    warnings = nothing_measured(response)
    for warning in warnings:
        print(f"tierank agree: warning: {warning}", file=sys.stderr)
    return EXIT_NOTHING_MEASURED if warnings else EXIT_OK


def nothing_measured(response: eval_pb2.CompareLabelsResponse) -> list[str]:
    """What could not be measured for want of anything the two label sets share. (Sets that
    share no query are refused by the server, INVALID_ARGUMENT naming `b`.)"""
    if response.shared_pairs:
        return []
    return [
        f"no (query, document) pair is labeled by both A and B ({response.only_a} only by A,"
        f" {response.only_b} only by B): no agreement to measure"
    ]


def as_json(response: eval_pb2.CompareLabelsResponse) -> dict[str, Any]:
    result: dict[str, Any] = {
        "shared_pairs": response.shared_pairs,
        "only_a": response.only_a,
        "only_b": response.only_b,
        "kappa": optional(response, "kappa"),
        "linear_weighted_kappa": optional(response, "linear_weighted_kappa"),
        "quadratic_weighted_kappa": optional(response, "quadratic_weighted_kappa"),
        "binary_kappa": optional(response, "binary_kappa"),
        "relevance_threshold": response.relevance_threshold,
        "confusion": {
            "grades": list(response.confusion.grades),
            "rows": [list(row.counts) for row in response.confusion.rows],
        },
    }
    if response.HasField("systems"):
        systems = response.systems
        result["systems"] = {
            "measure": systems.measure,
            "query_count": systems.query_count,
            "scores": [
                {"run": s.run, "a": optional(s, "score_a"), "b": optional(s, "score_b")}
                for s in systems.systems
            ],
            "kendall_tau_b": optional(systems, "kendall_tau_b"),
            "spearman_rho": optional(systems, "spearman_rho"),
            "rbo_persistence": systems.rbo_persistence,
            "rbo_extrapolated": systems.rbo_extrapolated,
            "rbo_lower_bound": systems.rbo_lower_bound,
        }
    return result


def print_report(response: eval_pb2.CompareLabelsResponse) -> None:
    console = table_console()
    console.print(
        f"pairs labeled by both: {response.shared_pairs} "
        f"(only A: {response.only_a}, only B: {response.only_b})\n"
        f"kappa {number(optional(response, 'kappa'))}, "
        f"linear weighted {number(optional(response, 'linear_weighted_kappa'))}, "
        f"quadratic weighted {number(optional(response, 'quadratic_weighted_kappa'))}, "
        f"binary (grade >= {response.relevance_threshold}) "
        f"{number(optional(response, 'binary_kappa'))}"
    )
    if response.shared_pairs:
        console.print("confusion matrix (rows: A's grade, columns: B's grade)")
        console.print(confusion_table(response.confusion, "A \\ B"))
    if not response.HasField("systems"):
        return
    systems = response.systems
    table = Table(
        title=f"systems by {systems.measure} on {plural(systems.query_count, 'query', 'queries')}",
        box=box.SIMPLE_HEAD,
        title_justify="left",
    )
    for column in ("run", "A", "B"):
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=True)
    names = short_names([score.run for score in systems.systems])
    for score in systems.systems:
        table.add_row(
            names[score.run], number(optional(score, "score_a")), number(optional(score, "score_b"))
        )
    console.print(table)
    console.print(
        f"Kendall tau-b {number(optional(systems, 'kendall_tau_b'))}, "
        f"Spearman rho {number(optional(systems, 'spearman_rho'))}, "
        f"RBO(p={systems.rbo_persistence:g}) extrapolated {systems.rbo_extrapolated:.4f} "
        f"(lower bound {systems.rbo_lower_bound:.4f})"
    )
