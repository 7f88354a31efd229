"""`tierank study`: judge a whole collection (many queries, several systems' runs) and compare
the systems: `run`, `add-run`, `list`, `show`, `watch`, `cancel`, `report`."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tierank import limits
from tierank.client._inputs import (
    SHEET_COLUMNS,
    HumanSample,
    InputError,
    Passage,
    line_of,
    read_human_sample,
    read_lines,
    read_passages,
    read_qrels,
    read_rubric,
    read_run,
    read_topics,
)
from tierank.client._names import study_name
from tierank.client._resume import ReconnectPolicy
from tierank.client._spec import JUDGE_SYNTAX
from tierank.client._study import StudyFiles, chunks, pooled_documents
from tierank.client._study_html import render_report_html
from tierank.client._study_report import report_json, study_state
from tierank.client.commands._eval_shared import add_mapping_options, fixed_mapping, write_output
from tierank.client.commands._shared import (
    EXIT_INTERRUPTED,
    EXIT_NO_VERDICTS,
    EXIT_OK,
    EXIT_PROVISIONAL,
    EXIT_SERVER_ERROR,
    JOB_SPEC_FLAGS,
    CommandError,
    Connection,
    UsageError,
    add_allow_unqualified_option,
    add_budget_options,
    add_judging_options,
    add_reconnect_option,
    add_rubric_option,
    add_server_options,
    budget_options,
    judge_argument,
    name_flags,
    positive_int,
    ranking_spec,
    same_server,
    server_connection,
)
from tierank.client.sync import Client
from tierank.resources import FINAL_STUDY_STATES
from tierank.v1 import eval_pb2, study_pb2

# How often `study run` and `study watch` redraw their progress line on a terminal; without
# one, a line is written when the progress changes, at most this often.
_PROGRESS_EVERY_S = 2.0
_EXIT_HELP = (
    f"Exit status: {EXIT_OK} every query settled, {EXIT_SERVER_ERROR} error, 2 usage error,"
    f" {EXIT_NO_VERDICTS} no judge answered, {EXIT_PROVISIONAL} provisional (a query not"
    f" settled: budget, deadline, cancel), {EXIT_INTERRUPTED} interrupted (the study goes on)."
)


# The fields of ExtendStudyRequest (`add-run`) and StudySpec (`run`) set from flags: the
# server's field violations are reported by the flags (name_flags).
_ROUND_FLAGS = {
    "budget.max_judge_calls": "--max-calls",
    "budget.max_input_tokens": "--max-input-tokens",
    "budget.max_cost_usd": "--max-cost",
    "deadline_seconds": "--deadline",
    "request_id": "--request-id",
}
_STUDY_FLAGS = (
    {f"spec.ranking.{field}": flag for field, flag in JOB_SPEC_FLAGS.items()}
    | {f"spec.{field}": flag for field, flag in _ROUND_FLAGS.items()}
    | {
        "spec.depth": "--depth",
        "spec.max_live_queries": "--max-live",
        "spec.measures": "--measure",
        "spec.labels.pointwise.probe_rate": "--probe-rate",
        "spec.labels.pointwise.judge": "--anchor-judge (or the first --judge)",
        "spec.labels.rank_bands": "--bands",
        "spec.labels.grade_levels": "--levels",
        "spec.display_name": "--name",
        "request_id": "--request-id",
    }
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "study",
        help="judge a collection: many queries, several systems' runs, one comparison",
        description="A study pools several systems' runs (each one's top --depth per query),"
        " judges every query's pool as a job, turns the tiers into labels and compares the"
        " systems with bootstrap intervals and paired tests (docs/studies.md).",
    )
    commands = parser.add_subparsers(
        dest="study_command",
        metavar="SUBCOMMAND",
        required=True,
        help="run, add-run, list, show, watch, cancel or report",
    )
    _add_run(commands)
    _add_add_run(commands)
    listing = commands.add_parser("list", help="the studies, newest first")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    add_server_options(listing)
    listing.set_defaults(handler=_list)
    for name, help_text, handler in (
        ("show", "a study's state and progress", _show),
        (
            "watch",
            "follow a study's progress until it ends (resuming one stopped with its embedded"
            " server), then print the table and write the results as `study run` does",
            _watch,
        ),
        ("cancel", "stop a study and its queries' jobs (what was judged is kept)", _cancel),
    ):
        sub = commands.add_parser(name, help=help_text, epilog=_EXIT_HELP)
        sub.add_argument("study", metavar="STUDY", help='"studies/ID" or just ID')
        if name == "watch":
            _add_output_options(sub)
        else:
            sub.add_argument("--json", action="store_true", help="the study as JSON")
        add_server_options(sub)
        if name == "watch":
            add_reconnect_option(sub)
        sub.set_defaults(handler=handler)
    report = commands.add_parser(
        "report",
        help="write a study's qrels.txt, report.json and report.html",
        epilog=_EXIT_HELP,
    )
    report.add_argument("study", metavar="STUDY", help='"studies/ID" or just ID')
    _add_output_options(report)
    add_server_options(report)
    report.set_defaults(handler=_report)
    _add_sample(commands)
    _add_calibrate(commands)


def _add_sample(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "sample",
        help="pick queries for a person to label, and write their pools as a labelling sheet",
        description="Pick --queries of the study's judged queries at random (or one per band"
        " of pool size, --stratify) and write their pools as a labelling sheet: TSV with the"
        " columns qid, docid, query, passage and an empty grade, each query's documents in a"
        " seeded random order (not the tournament's, which would lead the labeller). Fill in"
        " the grades (0-3: TREC DL's scale) and apply them with `tierank study calibrate`.",
    )
    parser.add_argument("study", metavar="STUDY", help='"studies/ID" or just ID')
    parser.add_argument(
        "--queries", type=positive_int, required=True, help="how many queries to pick"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the choice (default 0)")
    parser.add_argument(
        "--stratify",
        action="store_true",
        help="one query from each of --queries bands of pool size, not a plain random choice",
    )
    parser.add_argument(
        "--output", type=Path, metavar="FILE", help="the sheet (default: standard output)"
    )
    add_server_options(parser)
    parser.set_defaults(handler=_sample)


def _add_calibrate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "calibrate",
        help="apply a human sample to a study that has ended, judging nothing again",
        description="Send a person's grades of some of the study's queries (a filled-in"
        " sheet of `tierank study sample`, or TREC qrels) and recompute the study's labels"
        " and report with them: the grades are calibrated to the sample, the sample's queries"
        " keep their human labels, and the intervals become prediction-powered. Nothing is"
        " judged again. Then print the table and write qrels.txt, report.json, report.html.",
        epilog=_EXIT_HELP,
    )
    parser.add_argument("study", metavar="STUDY", help='"studies/ID" or just ID')
    parser.add_argument(
        "--human-sample", type=Path, required=True, metavar="FILE", help="the person's grades"
    )
    _add_output_options(parser)
    add_server_options(parser)
    parser.set_defaults(handler=_calibrate)


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="where qrels.txt, report.json and report.html go (default ./study-ID/)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print report.json to stdout instead of a table"
    )
    parser.add_argument(
        "--per-query",
        type=Path,
        metavar="FILE",
        help="also write each system's measures per query (TSV: system, measure, qid, value;"
        " NA where undefined), as `trec_eval -q` does",
    )


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "run",
        help="create a study, judge it and report",
        description="Create a study from topics, passages and systems' runs, judge it with"
        " progress on stderr, then print the system table and write qrels.txt, report.json"
        " and report.html.",
        epilog=_EXIT_HELP,
    )
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument(
        "--topics", type=Path, required=True, help="qid<TAB>text per line, or JSONL"
    )
    inputs.add_argument(
        "--passages",
        type=Path,
        required=True,
        help='passage texts: JSONL ({"docid","contents"} or {"id","text","metadata"?}) or'
        " docid<TAB>text; only pooled documents are read",
    )
    inputs.add_argument(
        "--run",
        dest="runs",
        action="append",
        required=True,
        metavar="NAME=RUN.trec",
        help="a system's TREC run, repeatable",
    )
    inputs.add_argument(
        "--depth",
        type=positive_int,
        default=limits.DEFAULT_STUDY_DEPTH,
        help=f"pool depth: each run's top D per query is judged (default"
        f" {limits.DEFAULT_STUDY_DEPTH}, at most {limits.MAX_STUDY_DEPTH})",
    )
    inputs.add_argument(
        "--human-qrels", type=Path, help="human labels (TREC qrels), for agreement figures"
    )
    inputs.add_argument(
        "--human-sample",
        type=Path,
        metavar="FILE",
        help="a person's grades (0-3) of some of the study's queries: TREC qrels or a sheet"
        " `tierank study sample` wrote and someone filled in. They calibrate the labels, keep"
        " their queries' human labels and make the intervals prediction-powered (they then"
        " include the judge's error)",
    )
    inputs.add_argument(
        "--qids",
        metavar="FILE|LIST",
        help="study only these queries: a file of query ids (one per line) or a"
        " comma-separated list",
    )
    inputs.add_argument("--name", default="", help="the study's display name")
    judging = parser.add_argument_group("judging (as `tierank rank`)")
    add_rubric_option(judging, "the server's definition")
    add_judging_options(
        judging,
        top_k_help="settle only each query's top K (default 0: the whole pool's order, which"
        " the labels are read from; a top K costs about half the calls and labels the rest of"
        " each pool from a rougher order)",
    )
    judging.add_argument(
        "--max-live",
        type=positive_int,
        help=f"queries judged at once (default {limits.DEFAULT_LIVE_QUERIES},"
        f" {limits.DEFAULT_BATCH_LIVE_QUERIES} with --provider-batch;"
        f" at most {limits.MAX_LIVE_QUERIES})",
    )
    judging.add_argument(
        "--provider-batch",
        action="store_true",
        help="send every judge's calls to its provider's batch API: about half the price, but"
        " each wave of calls is answered within the vendor's window (usually under an hour, up"
        " to 24 h), so the study takes hours rather than minutes. Every judge must be an"
        " openai, anthropic or gemini one",
    )
    add_budget_options(judging, "the study's")
    judging.add_argument(
        "--measure",
        dest="measures",
        action="append",
        help="a measure of the report, repeatable; the first ranks the systems (default:"
        f" {', '.join(limits.DEFAULT_STUDY_MEASURES)})",
    )
    labels = parser.add_argument_group("labels from tiers")
    add_mapping_options(
        labels,
        ("pointwise", "bands", "levels"),
        default=None,
        default_help="pointwise when a judge can grade (an LLM or the oracle), else bands",
    )
    labels.add_argument(
        "--anchor-judge",
        type=judge_argument,
        metavar=JUDGE_SYNTAX,
        help="the pointwise grader of --mapping pointwise (default: the first --judge that"
        " can grade), read as --judge reads it, e.g. openai:gpt-4.1-mini",
    )
    labels.add_argument(
        "--probe-rate",
        type=float,
        help=f"pointwise calls per pooled document (default {limits.DEFAULT_PROBE_RATE}, at"
        f" most 1; each query at least {limits.MIN_PROBES})",
    )
    add_allow_unqualified_option(parser, judging, "study run", "a study")
    judging.add_argument(
        "--request-id",
        default="",
        help="idempotency key: rerunning with it never makes a second study",
    )
    _add_output_options(parser)
    add_server_options(parser)
    name_flags(parser, _STUDY_FLAGS)
    parser.set_defaults(handler=_run)


def _add_add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "add-run",
        help="add systems' runs to a study that has ended and judge only what they add",
        description="Pool more systems' runs into a study that has ended: only the documents"
        " their top D (the study's depth) adds to each query's pool are judged, each such"
        " query's new job starting from every verdict its previous job holds. Then print the"
        " system table"
        " (with how much of each added system's top 10 was judged before and after) and"
        " write qrels.txt, report.json and report.html.",
        epilog=_EXIT_HELP,
    )
    parser.add_argument("study", metavar="STUDY", help='"studies/ID" or just ID')
    parser.add_argument(
        "runs", nargs="+", metavar="NAME=RUN.trec", help="a system's TREC run, one or more"
    )
    parser.add_argument(
        "--passages",
        type=Path,
        help="passage texts of documents the study was not sent yet (as `study run`'s);"
        " only those the added runs pool are read",
    )
    limits_group = parser.add_argument_group("limits of this round")
    add_budget_options(limits_group, "this round's")
    parser.add_argument(
        "--request-id",
        default="",
        help="idempotency key: rerunning with it sends nothing twice and judges nothing twice",
    )
    _add_output_options(parser)
    add_server_options(parser)
    name_flags(parser, _ROUND_FLAGS)
    parser.set_defaults(handler=_add_run_to_study)


def _add_run_to_study(args: argparse.Namespace) -> int:
    runs = {name: read_run(path) for name, path in _systems(args.runs, "").items()}
    budget, deadline = budget_options(args)
    request_id = args.request_id or uuid.uuid4().hex
    name = study_name(args.study)
    with server_connection(args, resume_jobs=True) as connection, connection.client() as client:
        study = client.get_study(name)
        files = StudyFiles(topics={}, runs=runs)
        if args.passages is not None:
            wanted = pooled_documents(runs, study.spec.depth)
            files.passages = _as_sent(read_passages(args.passages, wanted))
        client.add_study_inputs(name, chunks(files, "add"))
        study = client.extend_study(
            name,
            systems=list(runs),
            request_id=request_id,
            budget=budget,
            deadline_seconds=deadline,
        )
        try:
            study_round = study.inputs.rounds[-1]
            print(
                f"{name}: round {study_round.round} adds {study_round.documents_added:,}"
                f" documents to {study_round.queries_extended:,} queries",
                file=sys.stderr,
            )
            study = _follow(connection, name, args)
        except KeyboardInterrupt:
            raise _interrupted(name, args) from None
        return _write_results(client, study, args)


def _systems(values: list[str], flag: str = "--run ") -> dict[str, Path]:
    systems: dict[str, Path] = {}
    for value in values:
        name, equals, path = value.partition("=")
        if not equals or not name or not path:
            raise UsageError(f"{flag}{value!r}: expected NAME=RUN.trec")
        if name in systems:
            raise UsageError(f"{flag}{value!r}: system {name!r} given twice")
        systems[name] = Path(path)
    return systems


def _read_files(args: argparse.Namespace) -> StudyFiles:
    if not 1 <= args.depth <= limits.MAX_STUDY_DEPTH:
        raise UsageError(f"--depth must be between 1 and {limits.MAX_STUDY_DEPTH}")
    runs = {name: read_run(path) for name, path in _systems(args.runs).items()}
    topics = read_topics(args.topics)
    if args.qids:
        chosen = _chosen_queries(args.qids, topics)
        topics = {qid: text for qid, text in topics.items() if qid in chosen}
        runs = {
            name: {qid: docs for qid, docs in run.items() if qid in chosen}
            for name, run in runs.items()
        }
    files = StudyFiles(topics=topics, runs=runs)
    files.passages = _as_sent(read_passages(args.passages, pooled_documents(runs, args.depth)))
    if args.human_qrels is not None:
        files.human = _read_human_qrels(args.human_qrels)
    if args.human_sample is not None:
        studied = {qid for run in runs.values() for qid in run if qid in topics}
        files.sample = _read_sample(args.human_sample, studied).grades
    return files


def _as_sent(passages: dict[str, Passage]) -> dict[str, tuple[str, dict[str, str]]]:
    return {doc_id: (p.text, p.metadata) for doc_id, p in passages.items()}


def _read_human_qrels(path: Path) -> dict[str, dict[str, int]]:
    """--human-qrels, their grades checked against the API's scale for human qrels here, where
    the line is known."""
    qrels = read_qrels(path)
    for qid, judged in qrels.items():
        for docid, grade in judged.items():
            if not limits.MIN_HUMAN_GRADE <= grade <= limits.MAX_HUMAN_GRADE:
                raise InputError(
                    f"{path}:{line_of(path, qid, docid)}: grade {grade} of {qid} {docid} is"
                    f" outside {limits.MIN_HUMAN_GRADE} to {limits.MAX_HUMAN_GRADE}, the grades"
                    " human qrels may hold"
                )
    return qrels


def _chosen_queries(value: str, topics: dict[str, str]) -> set[str]:
    """--qids: a file of query ids (the first field of each line), or a comma-separated list;
    each must be a topic's."""
    path = Path(value)
    if path.is_file():
        chosen = [line.split()[0] for _, line in read_lines(path)]
    else:
        chosen = [qid.strip() for qid in value.split(",") if qid.strip()]
    if not chosen:
        raise UsageError("--qids names no query")
    unknown = [qid for qid in chosen if qid not in topics]
    if unknown:
        raise UsageError(
            f"--qids: {len(unknown)} of its queries are not in the topics, e.g. {unknown[:5]}"
        )
    return set(chosen)


def _read_sample(path: Path, studied: set[str]) -> HumanSample:
    """--human-sample, its queries checked against the study's (`studied`)."""
    sample = read_human_sample(path)
    strangers = sorted((line, qid) for qid, line in sample.lines.items() if qid not in studied)
    if strangers:
        line, qid = strangers[0]
        more = f" (and {len(strangers) - 1} more queries)" if len(strangers) > 1 else ""
        raise InputError(
            f"{path}:{line}: query {qid!r} is not in the study: no topic, or no run retrieved"
            f" anything for it{more}"
        )
    return sample


def _labels(args: argparse.Namespace) -> eval_pb2.TierMapping:
    """How the study's tiers become grades: what --mapping says, or, without it, the server's
    choice (pointwise when a judge can grade) unless a pointwise option says pointwise."""
    pointwise_asked = args.anchor_judge is not None or args.probe_rate is not None
    bands_asked = bool(args.bands) or args.below != 0
    mapping = args.mapping or ("pointwise" if pointwise_asked else "bands" if bands_asked else None)
    if mapping is None:
        return eval_pb2.TierMapping()
    if mapping != "pointwise":
        if pointwise_asked:
            raise UsageError("--anchor-judge and --probe-rate go with --mapping pointwise")
        return fixed_mapping(argparse.Namespace(**{**vars(args), "mapping": mapping}))
    if bands_asked:
        raise UsageError("--bands and --below go with --mapping bands")
    labels = eval_pb2.TierMapping()
    anchoring = labels.pointwise
    if args.anchor_judge is not None:
        anchoring.judge.CopyFrom(args.anchor_judge)
    elif args.judges:
        anchoring.judge.CopyFrom(args.judges[0])
    else:
        raise UsageError("--mapping pointwise needs --anchor-judge or a --judge that can grade")
    anchoring.seed = args.seed
    if args.probe_rate is not None:
        if not 0 < args.probe_rate <= 1:
            raise UsageError("--probe-rate must be above 0 and at most 1")
        anchoring.probe_rate = args.probe_rate
    return labels


def _spec(args: argparse.Namespace) -> study_pb2.StudySpec:
    ranking = ranking_spec(args, "", [], read_rubric(args.rubric))
    budget, deadline = budget_options(args)
    spec = study_pb2.StudySpec(
        display_name=args.name,
        depth=args.depth,
        ranking=ranking,
        budget=budget,
        deadline_seconds=deadline,
        measures=args.measures or [],
        max_live_queries=args.max_live or 0,
        labels=_labels(args),
        provider_batch=args.provider_batch,
    )
    return spec


def _run(args: argparse.Namespace) -> int:
    files = _read_files(args)
    spec = _spec(args)
    request_id = args.request_id or uuid.uuid4().hex
    with server_connection(args, resume_jobs=True) as connection, connection.client() as client:
        study = client.create_study(spec, request_id=request_id)
        try:
            client.add_study_inputs(study.name, chunks(files, request_id))
            study = client.start_study(study.name)
            progress = study.progress
            print(
                f"{study.name}: {progress.queries} queries,"
                f" {progress.pooled_documents} documents to judge",
                file=sys.stderr,
            )
            study = _follow(connection, study.name, args)
        except KeyboardInterrupt:
            raise _interrupted(study.name, args) from None
        return _write_results(client, study, args)


def _follow(connection: Connection, name: str, args: argparse.Namespace) -> study_pb2.Study:
    """Show the study's progress on stderr until it ends; returns it as it ended."""
    live = sys.stderr.isatty()
    shown = ""
    last_write = 0.0
    reconnect = ReconnectPolicy(window=getattr(args, "reconnect_for", 60.0))
    with connection.client(reconnect=reconnect) as client:
        study = client.get_study(name)
        for study in client.watch_study(name):
            line = progress_line(study)
            now = time.monotonic()
            if line != shown and (live or now - last_write >= _PROGRESS_EVERY_S
                                  or study.state in FINAL_STUDY_STATES):  # fmt: skip
                if live:
                    print(f"\r\x1b[2K{line}", end="", file=sys.stderr, flush=True)
                else:
                    print(line, file=sys.stderr, flush=True)
                shown, last_write = line, now
        if live:
            print(file=sys.stderr)
    return study


def progress_line(study: study_pb2.Study, stopped: str = "") -> str:
    """The study's state and progress in one line; `stopped`: why nothing drives it on (see
    `_stopped_note`), said instead of an ETA."""
    progress = study.progress
    ended = progress.settled + progress.provisional + progress.failed
    usage = progress.usage
    parts = [
        f"{ended}/{progress.queries} queries ended ({progress.settled} settled,"
        f" {progress.running} {'unfinished' if stopped else 'running'})",
        f"{progress.judge_calls:,} calls",
        f"{usage.input_tokens:,} input tokens",
        f"${usage.cost_usd:.4f}",
    ]
    open_batches = [b for b in study.provider_batches if b.state in _UNENDED_BATCH_STATES]
    if open_batches and study.state not in FINAL_STUDY_STATES:
        calls = sum(batch.calls for batch in open_batches)
        batches = (
            "1 provider batch"
            if len(open_batches) == 1
            else f"{len(open_batches)} provider batches"
        )
        parts.append(f"waiting on {batches} ({calls:,} calls)")
    if progress.grading and study.state not in FINAL_STUDY_STATES:
        parts.append(f"{progress.grading} queries' pointwise probes under way")
    if stopped:
        parts.append(stopped)
        return f"{study.name} not running: " + " · ".join(parts)
    if study.HasField("pause") and study.state not in FINAL_STUDY_STATES:
        waited = _age(time.time() - study.pause.since.ToSeconds())
        parts.append(f"paused for {waited}: {study.pause.reason}")
    elif progress.HasField("eta_seconds") and study.state not in FINAL_STUDY_STATES:
        parts.append(f"ETA {progress.eta_seconds:.0f}s")
    return f"{study.name} {study_state(study.state)}: " + " · ".join(parts)


# The database variable the embedded server reads when no --db is given.
_DB_ENV = "TIERANK_DB"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _stopped_note(study: study_pb2.Study, args: argparse.Namespace) -> str:
    """Why a running study does not run, where that is known: on the embedded server of
    `show` or `list` on a SQLite file (one server at a time, and this one drives only what is
    started or cancelled through it), a study still running was left by a command that
    stopped, and with it its server. Empty otherwise (a --server, or PostgreSQL, where
    another replica may be driving it)."""
    if study.state != study_pb2.STUDY_STATE_RUNNING or args.server:
        return ""
    database = args.db or os.environ.get(_DB_ENV) or ""
    if database.startswith(_POSTGRES_SCHEMES):
        return ""
    return (
        "its server stopped with the command that ran it;"
        f" `tierank study watch {study.name}{same_server(args)}` goes on"
    )


def _interrupted(name: str, args: argparse.Namespace) -> CommandError:
    """Ctrl-C: where the study is, and the commands that follow it to its results (`watch`
    writes them as `run` does), write what is judged so far (`report`) or stop it."""
    where = same_server(args)
    commands = (
        f"`tierank study watch {name}{where}` follows it and writes its results when it ends,"
        f" `tierank study report {name}{where}` writes what is judged so far, `tierank study"
        f" cancel {name}{where}` stops it"
    )
    if args.server:
        return CommandError(
            f"interrupted; {name} goes on at {args.server}: {commands}", EXIT_INTERRUPTED
        )
    return CommandError(
        f"interrupted; {name} stops with the embedded server and goes on when a later command"
        f" starts it: {commands}",
        EXIT_INTERRUPTED,
    )


def _write_results(client: Client, study: study_pb2.Study, args: argparse.Namespace) -> int:
    report = client.get_study_report(study.name)
    queries = list(client.list_study_queries(study.name))
    document = report_json(study, report, queries)
    out_dir = args.output_dir or Path(f"study-{study.name.removeprefix('studies/')}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "qrels.txt").write_text(client.export_study_qrels(study.name))
        (out_dir / "report.json").write_text(json.dumps(document, indent=2) + "\n")
        (out_dir / "report.html").write_text(render_report_html(document))
    except OSError as error:
        raise CommandError(f"cannot write the results to {out_dir}: {error.strerror}") from None
    if args.per_query is not None:
        _write_per_query(args.per_query, document)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        _print_table(document)
        print(f"wrote {out_dir}/qrels.txt, report.json, report.html", file=sys.stderr)
    for warning in document["warnings"]:
        print(f"tierank study: warning: {warning}", file=sys.stderr)
    for judge in document["unqualified_judges"]:
        print(
            f"tierank study: warning: judge {judge['judge']} ran in {judge['queries']} of"
            f" {document['queries']['total']} queries, {judge['note']}",
            file=sys.stderr,
        )
    return _exit_code(study)


def _write_per_query(path: Path, document: dict[str, Any]) -> None:
    """Each system's measures per query, as `trec_eval -q` lists them: one line per system,
    measure and query (the study's judged queries, in topic order), NA where undefined."""
    lines = ["system\tmeasure\tqid\tvalue"]
    for query in document["per_query"]:
        for system, values in query["measures"].items():
            for measure, value in values.items():
                shown = "NA" if value is None else f"{value:.4f}"
                lines.append(f"{system}\t{measure}\t{query['query_id']}\t{shown}")
    try:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror}") from None


def _exit_code(study: study_pb2.Study) -> int:
    progress = study.progress
    if study.state == study_pb2.STUDY_STATE_FAILED:
        print(f"tierank study: {study.name} failed: {study.error.message}", file=sys.stderr)
        if study.error.code == NO_JUDGE_ANSWERED:
            return EXIT_NO_VERDICTS
        return EXIT_SERVER_ERROR
    if progress.judge_calls == 0 and progress.settled == 0:
        return EXIT_NO_VERDICTS
    if study.state != study_pb2.STUDY_STATE_SUCCEEDED or progress.settled < progress.queries:
        print(
            f"tierank study: warning: provisional result ({progress.settled} of"
            f" {progress.queries} queries settled; {study_state(study.state)})",
            file=sys.stderr,
        )
        return EXIT_PROVISIONAL
    return EXIT_OK


def _p_value(p: float) -> str:
    # The randomization test's smallest p is 1/(draws + 1): below 0.001 it says only that.
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


# The code a study fails with when no judge answered any of its calls (google.rpc UNAVAILABLE).
NO_JUDGE_ANSWERED = 14
# Systems up to which the table lists every pair (beyond, the neighbours; report.json has all).
_PAIRS_SHOWN_UP_TO = 12


def _print_table(document: dict[str, Any]) -> None:
    primary = document["primary_measure"]
    measures = document["measures"]
    queries = document["queries"]
    print(f"{'system':<20} " + " ".join(f"{m:>24}" for m in measures))
    for system in document["systems"]:
        cells = []
        for measure in measures:
            value = system["measures"][measure]
            interval = (
                f"{_number(value['mean'])} [{_number(value['low'])},{_number(value['high'])}]"
            )
            cells.append(f"{interval:>24}")
        print(f"{system['name']:<20} " + " ".join(cells))
    judged, total = queries["judged"], queries["total"]
    covered = f"means over the {judged} judged queries of {total}"
    if judged < total:
        covered += f" ({total - judged} not judged: no labels, left out)"
    print(covered)
    confidence = round(100 * document["confidence"])
    if document["interval_method"] == "ppi":
        sample = document["sample"] or {}
        print(
            f"{confidence}% intervals prediction-powered from the human sample of"
            f" {sample.get('queries', 0)} queries: they include the judge's error"
        )
    else:
        print(
            f"{confidence}% bootstrap intervals over the queries, labels taken as fixed: they do"
            " not include the judge's own errors (--human-sample makes intervals that do)"
        )
    print(f"ranking by {primary}: {' > '.join(document['ranking'])}")
    every_pair = len(document["systems"]) <= _PAIRS_SHOWN_UP_TO
    shown = document["pairs"] if every_pair else document["comparisons"]
    if shown:
        which = "every pair" if every_pair else "neighbours (every pair: report.json)"
        print(f"{which}, p-values Holm-adjusted over all {len(document['pairs'])} pairs:")
    for comparison in shown:
        verdict = "distinguishable" if comparison["distinguishable"] else "not distinguishable"
        low, high = comparison["low"], comparison["high"]
        print(
            f"  {comparison['better']} vs {comparison['worse']}:"
            f" {comparison['difference']:+.4f} [{low:+.4f}, {high:+.4f}],"
            f" {_p_value(comparison['p_value_adjusted'])}, {verdict}"
        )
    for entry in document["pooling"]:
        if entry["round"]:
            print(
                f"{entry['system']} (added in round {entry['round']}): Judged@10"
                f" {_number(entry['judged_before'])} before, {_number(entry['judged_after'])}"
                f" now; {entry['documents_added']:,} documents judged for its round"
            )
    agreement = document["agreement"]
    if agreement is not None:
        print(
            f"agreement with the human qrels: kappa {_number(agreement['kappa'])},"
            f" Kendall tau of the system orderings {_number(agreement['kendall_tau'])}"
        )
    sample = document["sample"]
    if sample is not None:
        print(
            f"the study's own labels on the human sample's {sample['queries']} queries: kappa"
            f" {_number(sample['kappa'])}, weighted kappa {_number(sample['weighted_kappa'])}"
            f" over {sample['pairs']:,} documents"
            + (
                f" ({sample['outside_pool']:,} judgments of documents outside the pools kept"
                " as labels)"
                if sample["outside_pool"]
                else ""
            )
        )
    cost = document["cost"]
    if cost["pointwise_calls"]:
        print(
            f"cost: {cost['calls']:,} calls, {cost['input_tokens']:,} input tokens, of which"
            f" pointwise probes {cost['pointwise_calls']:,} calls,"
            f" {cost['pointwise_input_tokens']:,} tokens"
        )


def _list(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        listed = False
        for study in client.list_studies():
            listed = True
            if args.json:
                print(json.dumps(_study_json(study)))
            else:
                line = progress_line(study, _stopped_note(study, args))
                print(line + (f" · trace {study.trace_id}" if study.trace_id else ""))
    if not listed and not args.json:  # as `tierank jobs` says "no jobs"; JSON lines: none
        print("no studies")
    return EXIT_OK


def _study_json(study: study_pb2.Study) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(study, preserving_proto_field_name=True)


def _show(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        study = client.get_study(study_name(args.study))
        _print_study(study, args.json, _stopped_note(study, args))
    return EXIT_OK


def _print_study(study: study_pb2.Study, as_json: bool, stopped: str = "") -> None:
    if as_json:
        print(json.dumps(_study_json(study), indent=2))
        return
    print(progress_line(study, stopped))
    for line in provider_batch_lines(study, time.time()):
        print(line)
    if study.trace_id:  # the server that made it was tracing
        print(f"trace: {study.trace_id}")
    if study.error.message:
        print(f"error: {study.error.message}")


_UNENDED_BATCH_STATES = (
    study_pb2.PROVIDER_BATCH_STATE_SUBMITTING,
    study_pb2.PROVIDER_BATCH_STATE_OPEN,
)


def provider_batch_lines(study: study_pb2.Study, now: float) -> list[str]:
    """A line for each provider batch not ended yet, then one that counts those that have
    (their details are in --json)."""
    lines = []
    ended = failed = 0
    for batch in study.provider_batches:
        if batch.state == study_pb2.PROVIDER_BATCH_STATE_ENDED:
            ended += 1
        elif batch.state == study_pb2.PROVIDER_BATCH_STATE_FAILED:
            failed += 1
        else:
            lines.append(_unended_batch_line(batch, now))
    if ended or failed:
        lines.append(f"provider batches ended: {ended}, failed: {failed}")
    return lines


def _unended_batch_line(batch: study_pb2.ProviderBatch, now: float) -> str:
    state = study_pb2.ProviderBatchState.Name(batch.state)
    if batch.HasField("submit_time"):
        since = f"submitted {_age(now - batch.submit_time.ToSeconds())} ago"
    else:
        since = f"recorded {_age(now - batch.create_time.ToSeconds())} ago"
    line = (
        f"provider batch {batch.provider}/{batch.model}"
        f" {state.removeprefix('PROVIDER_BATCH_STATE_').lower()}"
        f" {batch.vendor_id or '(no vendor id yet)'}: {batch.calls:,} calls, {since}"
    )
    if batch.vendor_status:
        line += f", {batch.vendor_status}"
    if batch.vendor_counts:
        counts = sorted(batch.vendor_counts.items())
        line += " (" + ", ".join(f"{name} {count:,}" for name, count in counts) + ")"
    return line


def _age(seconds: float) -> str:
    """12s, 7m, 3h05m: how long ago, to the unit that matters (the clocks of the server and
    the client may differ by a little)."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes = whole // 60
    return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _watch(args: argparse.Namespace) -> int:
    name = study_name(args.study)
    with server_connection(args, resume_jobs=True) as connection:
        try:
            study = _follow(connection, name, args)
        except KeyboardInterrupt:
            raise _interrupted(name, args) from None
        # The results `study run` would have written, had it not been stopped.
        with connection.client() as client:
            return _write_results(client, study, args)


def _cancel(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        _print_study(client.cancel_study(study_name(args.study)), args.json)
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        study = client.get_study(study_name(args.study))
        return _write_results(client, study, args)


def _sample(args: argparse.Namespace) -> int:
    name = study_name(args.study)
    with server_connection(args) as connection, connection.client() as client:
        judged = [q for q in client.list_study_queries(name) if q.job and q.pool_size]
        if len(judged) < args.queries:
            raise UsageError(f"--queries {args.queries}: {name} has {len(judged)} judged queries")
        chosen = choose_queries(judged, args.queries, args.seed, stratify=args.stratify)
        rows = ["\t".join(SHEET_COLUMNS)]
        rng = random.Random(args.seed)
        documents = 0
        for query in chosen:
            job = client.get_job(query.job, full=True)
            candidates = list(job.spec.candidates)
            rng.shuffle(candidates)
            for candidate in candidates:
                cells = (query.query_id, candidate.id, job.spec.query, candidate.text, "")
                rows.append("\t".join(_cell(cell) for cell in cells))
            documents += len(candidates)
    write_output(args.output, "\n".join(rows) + "\n")
    where = args.output or "standard output"
    print(
        f"wrote {len(chosen)} queries, {documents:,} documents to {where}: fill in the grade"
        f" column (0-3) and apply it with `tierank study calibrate {name} --human-sample"
        f" FILE{same_server(args)}`",
        file=sys.stderr,
    )
    return EXIT_OK


def choose_queries(
    queries: list[study_pb2.StudyQuery], count: int, seed: int, *, stratify: bool
) -> list[study_pb2.StudyQuery]:
    """`count` of the queries, in their order: a seeded random choice, or with `stratify` one
    from each of `count` bands of pool size (smallest to largest, as even as they divide)."""
    rng = random.Random(seed)
    if not stratify:
        picked = set(rng.sample(range(len(queries)), count))
    else:
        by_size = sorted(range(len(queries)), key=lambda i: (queries[i].pool_size, i))
        bands = [by_size[len(by_size) * b // count : len(by_size) * (b + 1) // count]
                 for b in range(count)]  # fmt: skip
        picked = {rng.choice(band) for band in bands}
    return [query for i, query in enumerate(queries) if i in picked]


def _cell(text: str) -> str:
    """A sheet cell: one line, no tab (a passage's own tabs and line ends become spaces)."""
    return " ".join(text.split())


def _calibrate(args: argparse.Namespace) -> int:
    name = study_name(args.study)
    with server_connection(args) as connection, connection.client() as client:
        studied = {query.query_id for query in client.list_study_queries(name)}
        sample = _read_sample(args.human_sample, studied)
        files = StudyFiles(topics={}, runs={}, sample=sample.grades)
        client.add_study_inputs(name, chunks(files, "sample"))
        study = client.calibrate_study(name)
        print(
            f"{name}: calibrated with {sample.judgments:,} human grades of"
            f" {len(sample.grades)} queries",
            file=sys.stderr,
        )
        return _write_results(client, study, args)
