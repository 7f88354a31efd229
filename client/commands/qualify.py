"""`tierank qualify`: measure a judge against a few human labels before trusting it; and
`tierank qualifications`: the tenant's stored results."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from tierank import limits
from tierank.client._inputs import read_rubric
from tierank.client._names import qualification_name
from tierank.client._spec import JUDGE_SYNTAX
from tierank.client.commands._admin import print_json
from tierank.client.commands._eval_shared import (
    add_connection_options,
    call,
    passages_file,
    qrels_file,
    run_file,
    topics_file,
)
from tierank.client.commands._operations import run_operation
from tierank.client.commands._shared import (
    EXIT_NOT_QUALIFIED,
    EXIT_OK,
    UsageError,
    add_rubric_option,
    judge_argument,
)
from tierank.v1 import eval_pb2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "qualify",
        help="measure a judge against human labels: accuracy, position bias, consistency",
        description="Run real listwise calls of JUDGE on a small human-labelled set (10-30 "
        "queries is enough), each batch in several shuffles, and report with 95% intervals: "
        "pair accuracy on pairs the humans grade differently (overall and by grade gap), "
        "position bias (how often each shown position is ranked first, against 1/k; answers "
        "that repeat or reverse the shown order), self-consistency across shuffles, cyclic "
        "triples, and with --pointwise the agreement of its 0-3 grades (confusion matrix, "
        "weighted kappa, precision/recall/F1). The result is stored for your tenant: jobs "
        "refuse a judge found no better than chance, and `--judge 'J?weight=qualified'` "
        "votes with the weight its accuracy earned. Exit status 0: usable; "
        f"{EXIT_NOT_QUALIFIED}: not better than chance.",
    )
    parser.add_argument(
        "--judge", required=True, type=judge_argument, metavar=JUDGE_SYNTAX, help="the judge"
    )
    parser.add_argument("--qrels", required=True, type=Path, help="human labels (TREC qrels)")
    parser.add_argument(
        "--topics", required=True, type=Path, help="query texts: qid<TAB>text per line, or JSONL"
    )
    parser.add_argument(
        "--passages", required=True, type=Path, help="passage texts: JSONL or docid<TAB>text"
    )
    parser.add_argument(
        "--run", type=Path, help="draw candidates from this run's top (judged documents only)"
    )
    add_rubric_option(parser)
    parser.add_argument(
        "--k",
        type=int,
        default=0,
        help=f"candidates per call (default {limits.DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--shuffles",
        type=int,
        default=0,
        help=f"orders each batch is shown in (default {limits.DEFAULT_SHUFFLES})",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=0,
        help=f"queries used (default {limits.DEFAULT_QUALIFY_QUERIES})",
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=0,
        help=f"batches per query (default {limits.DEFAULT_BATCHES_PER_QUERY})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for batches and shuffles")
    parser.add_argument(
        "--max-in-flight",
        type=int,
        help=f"calls at once (default {limits.DEFAULT_OPERATION_MAX_IN_FLIGHT})",
    )
    parser.add_argument(
        "--pointwise", action="store_true", help="also grade each passage 0-3 and compare"
    )
    parser.add_argument(
        "--threshold",
        type=int,
        default=0,
        help=f"relevant when grade >= this (default {limits.DEFAULT_RELEVANCE_THRESHOLD})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_connection_options(parser)
    parser.set_defaults(handler=run)

    listing = subparsers.add_parser(
        "qualifications",
        help="list your tenant's judge qualifications, newest first, or delete some",
        description="The qualifications `tierank qualify` stored for your tenant, newest first "
        "(the latest of a judge is the one jobs go by). `tierank qualifications delete NAME...` "
        "deletes qualifications (e.g. one measured against the wrong labels): jobs then go by "
        "the judge's next latest one, or take it unqualified when none is left.",
    )
    listing.add_argument(
        "action",
        nargs="?",
        choices=("list", "delete"),
        default="list",
        help="list (the default) or delete",
    )
    listing.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help='for delete: qualifications to delete, "qualifications/ID" (as listed) or just ID',
    )
    listing.add_argument(
        "--judge-identity", default="", help="only this judge identity's (as listed)"
    )
    listing.add_argument(
        "--limit",
        type=int,
        default=limits.DEFAULT_PAGE_SIZE,
        help=f"at most this many (default {limits.DEFAULT_PAGE_SIZE})",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(listing)
    listing.set_defaults(handler=list_qualifications)


def run(args: argparse.Namespace) -> int:
    request = eval_pb2.QualifyJudgeRequest(
        judge=args.judge,
        qrels=qrels_file(args.qrels),
        topics=topics_file(args.topics),
        passages=passages_file(args.passages),
        rubric=read_rubric(args.rubric),
        batch_size=args.k,
        shuffles=args.shuffles,
        max_queries=args.queries,
        batches_per_query=args.batches,
        seed=args.seed,
        max_in_flight=args.max_in_flight,
        pointwise=args.pointwise,
        relevance_threshold=args.threshold,
    )
    if args.run is not None:
        request.run.CopyFrom(run_file(args.run))
    result = run_operation(
        args, "qualify", lambda client: client.start_qualify_judge(request, timeout=args.timeout)
    ).qualification
    if args.json:
        print_json(as_json(result))
    else:
        print_report(result)
    return EXIT_OK if result.usable else EXIT_NOT_QUALIFIED


def list_qualifications(args: argparse.Namespace) -> int:
    if args.action == "delete":
        return delete_qualifications(args)
    if args.names:
        raise UsageError("names are for `tierank qualifications delete NAME...`")
    request = eval_pb2.ListQualificationsRequest(
        judge_identity=args.judge_identity, page_size=args.limit
    )
    listed = call(args, lambda stub: stub.ListQualifications)(request)
    if args.json:
        print_json([as_json(q) for q in listed.qualifications])
        return EXIT_OK
    if not listed.qualifications:
        print(
            f"no qualifications of {args.judge_identity}"
            if args.judge_identity
            else "no qualifications (`tierank qualify` makes one)"
        )
        return EXIT_OK
    for q in listed.qualifications:
        made = q.create_time.ToDatetime().strftime("%Y-%m-%d %H:%M")
        print(f"{q.name}  {made}  {q.judge_identity}  {q.query_count} queries  {q.verdict}")
    return EXIT_OK


def delete_qualifications(args: argparse.Namespace) -> int:
    if not args.names:
        raise UsageError("delete needs the NAME of at least one qualification (as listed)")
    delete = call(args, lambda stub: stub.DeleteQualification)
    for name in args.names:
        deleted = delete(eval_pb2.DeleteQualificationRequest(name=qualification_name(name)))
        print(f"deleted {deleted.name}  {deleted.judge_identity}  {deleted.verdict}")
    return EXIT_OK


def as_json(result: eval_pb2.Qualification) -> dict[str, Any]:
    return MessageToDict(
        result, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _share(p: eval_pb2.Proportion) -> str:
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}] ({p.count}/{p.total})"


# A judge giving one grade to this share of the passages (far more often than the humans did)
# is called out under its figures.
_ONE_GRADE_SHARE = 0.8


def _grade_lines(confusion: eval_pb2.ConfusionMatrix) -> list[str]:
    """How often each grade was given by the judge and by the humans, and the confusion matrix
    (rows: human grade, columns: the judge's): F1 and recall alone hide a judge that gives
    nearly every passage the same grade."""
    grades = list(confusion.grades)
    rows = [list(row.counts) for row in confusion.rows]
    human = [sum(row) for row in rows]
    judged = [sum(column) for column in zip(*rows, strict=True)] if rows else []
    total = sum(human)
    if not total:
        return []
    width = max(len(str(n)) for n in [*grades, *human, *judged]) + 1
    header = "".join(f"{g:>{width}}" for g in grades)

    def counts(values: list[int]) -> str:
        return "".join(f"{n:>{width}}" for n in values)

    lines = [
        f"  grades given     {header}",
        f"    by the judge   {counts(judged)}",
        f"    by the humans  {counts(human)}",
        "  confusion (rows: the human grade, columns: the judge's)",
        *(f"    human {g:<8} {counts(row)}" for g, row in zip(grades, rows, strict=True)),
    ]
    most = max(judged)
    common = grades[judged.index(most)]
    if most >= _ONE_GRADE_SHARE * total and human[judged.index(most)] < most / 2:
        lines.append(
            f"  note: the judge gave grade {common} to {most} of {total} passages;"
            " precision, recall and F1 say little about such a judge"
        )
    return lines


def print_report(q: eval_pb2.Qualification) -> None:
    listwise = q.listwise
    lines = [
        f"{q.name}: {q.judge_identity}, {q.query_count} queries, k={listwise.batch_size}",
        f"pair accuracy        {_share(listwise.pair_accuracy)}",
        *(f"  grade gap {g.gap}        {_share(g.accuracy)}" for g in listwise.by_gap),
        f"ranked first, by position shown (chance {listwise.first_position[0].chance:.2f}):"
        if listwise.first_position
        else "",
        *(
            f"  position {p.position:<3}       {_share(p.ranked_first)}"
            for p in listwise.first_position
        ),
        f"repeats shown order  {_share(listwise.repeats_shown_order)}",
        f"reverses shown order {_share(listwise.reverses_shown_order)}",
        f"self-consistency     {_share(listwise.self_consistency)}",
        f"cyclic triples       {_share(listwise.cyclic_triples)}",
    ]
    if q.HasField("pointwise"):
        pw = q.pointwise
        kappa = (
            f"{pw.quadratic_weighted_kappa:.2f}"
            if pw.HasField("quadratic_weighted_kappa")
            else "NA"
        )
        f1 = f"{pw.f1:.2f}" if pw.HasField("f1") else "NA"
        lines += [
            f"pointwise: quadratic weighted kappa {kappa}, F1 {f1} at grade >= "
            f"{pw.relevance_threshold}",
            f"  precision {_share(pw.precision)}",
            f"  recall    {_share(pw.recall)}",
            *_grade_lines(pw.confusion),
        ]
    cost = q.cost
    lines += [
        f"calls {cost.calls} ({cost.failed_calls} failed), input tokens "
        f"{cost.usage.input_tokens}, cost ${cost.usage.cost_usd:.4f}, "
        f"mean latency {q.mean_latency_seconds:.2f} s",
        q.verdict,
    ]
    print("\n".join(line for line in lines if line))
