"""`tierank qrels`: export jobs' tiers as TREC qrels."""

from __future__ import annotations

import argparse
from pathlib import Path

from tierank.client.commands._eval_shared import (
    add_connection_options,
    add_tier_options,
    call,
    print_labeling,
    tier_labels,
    write_output,
)
from tierank.client.commands._shared import EXIT_OK, UsageError
from tierank.v1 import eval_pb2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "qrels",
        help="export jobs' tiers as qrels",
        description="Turn the tiers of jobs (one per query, --job QID=JOB) into TREC qrels "
        "(qid 0 docid grade): by rank bands, by grade levels, or by pointwise anchoring, where "
        "a pointwise judge grades a few tier representatives and the tiers between inherit "
        "their grade. A summary of each job goes to stderr.",
    )
    parser.add_argument("--output", type=Path, help="write the qrels here instead of stdout")
    add_tier_options(parser)
    add_connection_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not args.jobs:
        raise UsageError("name at least one job with --job QID=JOB")
    request = eval_pb2.ExportQrelsRequest(tiers=tier_labels(args))
    response = call(args, lambda stub: stub.ExportQrels)(request)
    print_labeling(list(response.labeling))
    write_output(args.output, response.qrels)
    return EXIT_OK
