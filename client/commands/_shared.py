"""What several subcommands need: server and security options, exit codes, errors, a console."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tierank import limits
from tierank.addresses import parse_address, resolve
from tierank.client._connection import (
    ChannelSecurity,
    ConnectionSettingsError,
    channel_security,
    sync_channel,
)
from tierank.client._console import Console
from tierank.client._errors import FieldViolation, TierankError
from tierank.client._render import fit_console
from tierank.client._resume import DEFAULT_RECONNECT_WINDOW_SECONDS
from tierank.client._spec import ENSEMBLE_MODES, JUDGE_KEYS, JUDGE_SYNTAX, job_spec, parse_judge
from tierank.client.aio import AsyncClient
from tierank.client.local_server import LocalServer
from tierank.client.sync import Client
from tierank.v1 import rank_pb2

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
# The command ended, but its result is not what was asked for: no judge answered (`rank`,
# `fill`, `study`: nothing judged), or nothing the inputs share could be measured (`eval`,
# `agree`). Either way nothing was measured.
EXIT_NO_VERDICTS = 3
EXIT_NOTHING_MEASURED = EXIT_NO_VERDICTS
EXIT_PROVISIONAL = 4
# `tierank qualify` only: the judge was measured, and found no better than chance.
EXIT_NOT_QUALIFIED = 5
# A --timeout ran out before the command was done, as `timeout(1)` reports it.
EXIT_TIMED_OUT = 124
# What a shell reports for a process stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
# What a shell reports for a process killed by SIGPIPE (128 + 13), as for any Unix tool whose
# reader went away (`tierank watch J | head -5`).
EXIT_BROKEN_PIPE = 141

SERVER_ENV = "TIERANK_SERVER"
API_KEY_ENV = "TIERANK_API_KEY"
TLS_ENV = "TIERANK_TLS"
TLS_CA_ENV = "TIERANK_TLS_CA"
# Not TIERANK_TLS_CERT / TIERANK_TLS_KEY: those are the server's own certificate and key, and a
# shell or container that runs both must not hand the server's identity to the client.
TLS_CERT_ENV = "TIERANK_TLS_CLIENT_CERT"
TLS_KEY_ENV = "TIERANK_TLS_CLIENT_KEY"
# Each option that takes a value: its keyword (and args attribute), flag and variable.
_SECURITY_OPTIONS = (
    ("api_key", "--api-key", API_KEY_ENV),
    ("tls_ca", "--tls-ca", TLS_CA_ENV),
    ("tls_cert", "--tls-cert", TLS_CERT_ENV),
    ("tls_key", "--tls-key", TLS_KEY_ENV),
)
# The embedded server is loopback, plaintext and key-free whatever the shell holds for a real
# server: these of the server's variables are not passed on to it.
EMBEDDED_SERVER_ENV: dict[str, str | None] = dict.fromkeys(
    (
        "TIERANK_AUTH",
        "TIERANK_ALLOW_UNAUTHENTICATED",
        "TIERANK_TLS_CERT",
        "TIERANK_TLS_KEY",
        "TIERANK_TLS_CLIENT_CA",
    )
)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})
# How long a command waits for a --server that does not answer yet: long enough for one that
# is still starting (`tierank serve & tierank rank ...`), then it says "cannot reach" once.
CONNECT_TIMEOUT_ENV = "TIERANK_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see (exit code 2)."""


class CommandError(Exception):
    """A failure already worded for the user, one line (exit code 1 unless given)."""

    def __init__(self, message: str, exit_code: int = EXIT_SERVER_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_server_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--server and --db: a running server, or else an embedded server for the command's duration;
    and the --api-key and --tls* options for a running server. `settle_server` decides between
    them (and $TIERANK_SERVER) once the command line is parsed."""
    add_server_option(
        parser,
        "; without either, an embedded server (plaintext, no key) is started on 127.0.0.1 for"
        " this command",
    )
    parser.add_argument(
        "--db",
        # Not a Path: that would fold the "//" of a postgresql:// URL.
        metavar="FILE_OR_URL",
        help="database of the embedded server (default: the server's default,"
        " $TIERANK_DB or $XDG_DATA_HOME/tierank/tierank.db); not with --server, and"
        f" ${SERVER_ENV} is not used with it",
    )
    add_security_options(parser)


def add_server_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, more_help: str
) -> None:
    """--server; its default, $TIERANK_SERVER, is applied by `settle_server`, which must tell an
    explicit --server (refused with --db) from the variable (not used with --db)."""
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        help=f"tierank server address (default: ${SERVER_ENV}, unless --db is given), waited"
        f" for up to ${CONNECT_TIMEOUT_ENV} seconds ({DEFAULT_CONNECT_TIMEOUT_SECONDS:g})"
        f"{more_help}",
    )


def settle_server(args: argparse.Namespace) -> None:
    """Which server the command talks to, decided once for every command: the --server, or
    else an embedded server (the admin commands: the database itself) on the --db, or else
    $TIERANK_SERVER. --db names a database the command opens, so it wins over the variable,
    which may well be set for other commands; with an explicit --server, which serves its own
    database, one of the two would be ignored: the pair is refused."""
    if not (hasattr(args, "server") and hasattr(args, "db")):
        return
    if args.server and args.db:
        raise UsageError(
            "--server and --db exclude each other: --server names a running server, which uses"
            " its own database; --db the database of an embedded one (or, for the admin"
            " commands, the database worked on directly)"
        )
    if not args.server and not args.db:
        args.server = os.environ.get(SERVER_ENV) or None


def add_security_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--api-key, --tls, --tls-ca, --tls-cert, --tls-key: for --server only. Their defaults
    come from the environment in `remote_security`, never here, so --help cannot show a key."""
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"API key, sent as `authorization: Bearer KEY` (default: ${API_KEY_ENV}, which"
        " keeps it out of shell history and the process list)",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help=f"use TLS, trusting gRPC's default roots (or set ${TLS_ENV}=1);"
        " --tls-ca or --tls-cert imply it",
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        metavar="FILE",
        help=f"PEM CA bundle to trust for the server's certificate (default: ${TLS_CA_ENV})",
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="PEM client certificate (chain) for mutual TLS; needs --tls-key"
        f" (default: ${TLS_CERT_ENV})",
    )
    parser.add_argument(
        "--tls-key",
        type=Path,
        metavar="FILE",
        help=f"PEM private key of --tls-cert, unencrypted (default: ${TLS_KEY_ENV})",
    )


def remote_security(args: argparse.Namespace) -> ChannelSecurity:
    """The --server connection's key and TLS, each flag falling back to its variable; errors
    name the one that was used."""
    values: dict[str, str | Path | None] = {}
    names: dict[str, str] = {}
    for keyword, flag, variable in _SECURITY_OPTIONS:
        given = getattr(args, keyword)
        from_env = os.environ.get(variable) or None
        if given is None and from_env is not None:
            values[keyword], names[keyword] = from_env, f"${variable}"
        else:
            values[keyword], names[keyword] = given, flag
    try:
        api_key = values["api_key"]
        return channel_security(
            api_key=None if api_key is None else str(api_key),
            tls=args.tls or _env_flag(TLS_ENV),
            tls_ca=values["tls_ca"],
            tls_cert=values["tls_cert"],
            tls_key=values["tls_key"],
            names=names,
        )
    except ConnectionSettingsError as error:
        raise UsageError(str(error)) from None


def refuse_security_flags(args: argparse.Namespace, instead: str) -> None:
    """Security flags without --server would be silently ignored: say so instead. (Their
    variables are ignored: they may be meant for other commands.)"""
    flags = [("--tls", args.tls)]
    flags += [(flag, getattr(args, keyword)) for keyword, flag, _ in _SECURITY_OPTIONS]
    for flag, value in flags:
        if value is not None:
            raise UsageError(f"{flag} needs --server ({instead})")


@dataclass(frozen=True)
class Connection:
    """A server that answers, and how to talk to it (key and TLS)."""

    target: str
    security: ChannelSecurity = field(default_factory=ChannelSecurity)

    def client(self, **options: Any) -> Client:
        return Client(self.target, **self.security.keywords(), **options)

    def async_client(self, **options: Any) -> AsyncClient:
        return AsyncClient(self.target, **self.security.keywords(), **options)

    def channel(self, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
        """A blocking channel for a service the clients do not wrap (EvalService, AdminService)."""
        return sync_channel(self.target, self.security, options)


@contextlib.contextmanager
def server_connection(
    args: argparse.Namespace, *, resume_jobs: bool = False
) -> Iterator[Connection]:
    """The --server once it answers, or an embedded server for the command. The embedded
    server runs only the jobs created on it unless `resume_jobs`: a job left unfinished in the
    database (its command was killed) goes on only when asked for (`tierank watch`), never
    unseen during some other command."""
    if args.server:
        yield wait_for_server(args.server, remote_security(args))
        return
    refuse_security_flags(args, "the embedded server is plaintext and needs no key")
    resume = ("--resume-jobs", "on" if resume_jobs else "off")
    with LocalServer(db=args.db, env=EMBEDDED_SERVER_ENV, extra_args=resume) as server:
        yield Connection(server.address)


def wait_for_server(target: str, security: ChannelSecurity) -> Connection:
    """The server at `target` once it answers. An address that cannot be one (no port, a URL,
    a port out of range) or a host name that does not resolve is refused at once: waiting
    would not mend it."""
    try:
        address = parse_address(target, listening=False)
    except ValueError as error:
        raise UsageError(f"server address {error}") from None
    try:
        resolve(address)
    except ValueError as error:
        raise CommandError(f"cannot reach {target}: {error}") from None
    connection = Connection(target, security)
    with connection.client() as client:
        client.wait_ready(_connect_timeout())
    return connection


def _env_flag(name: str) -> bool:
    text = os.environ.get(name, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f"${name} must be 1 or 0, not {text!r}")


def _connect_timeout() -> float:
    text = os.environ.get(CONNECT_TIMEOUT_ENV) or str(DEFAULT_CONNECT_TIMEOUT_SECONDS)
    try:
        timeout = float(text)
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise UsageError(
            f"${CONNECT_TIMEOUT_ENV} must be a positive number of seconds, not {text!r}"
        )
    return timeout


def add_rubric_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    default: str = "the server's definition",
) -> None:
    """--rubric, the same for every command that judges; read it with `read_rubric`."""
    parser.add_argument(
        "--rubric",
        default="",
        help="what 'relevant' means for this task; @FILE reads it from FILE;"
        " preset:NAME[@VERSION] names a preset (list them with `tierank rubrics`)"
        f" (default: {default})".replace("%", "%%"),
    )


# What the server says when a job's judge was qualified as no better than chance (ErrorInfo).
JUDGE_NOT_QUALIFIED = "JUDGE_NOT_QUALIFIED"

# The fields of a JobSpec the command line sets from flags (`rank`'s spec, a study's
# spec.ranking), so that the server's field violations name the flag the user gave.
JOB_SPEC_FLAGS = {
    "query": "--query",
    "rubric": "--rubric",
    "judges": "--judge",
    "batch_size": "--k",
    "top_k": "--top-k",
    "max_in_flight": "--max-in-flight",
    "seed": "--seed",
    "ensemble_mode": "--ensemble",
    "quorum": "--quorum",
    "budget.max_judge_calls": "--max-calls",
    "budget.max_input_tokens": "--max-input-tokens",
    "budget.max_cost_usd": "--max-cost",
    "deadline_seconds": "--deadline",
}


def name_flags(parser: argparse.ArgumentParser, fields: Mapping[str, str]) -> None:
    """Report the server's field violations of `fields` (field path -> flag) by their flags:
    `spec.batch_size: must be between 2 and 20` is `--k: must be between 2 and 20`."""
    parser.set_defaults(field_flags=dict(fields))


def in_flag_words(violations: Sequence[FieldViolation], fields: Mapping[str, str]) -> str | None:
    """The violations in one line, each field the command line sets named by its flag (a field
    within one, such as a judge's parameter, by the flag and the field); None when no violation
    is of a field of `fields`, so that the server's own words stand."""
    described = []
    named = False
    for violation in violations:
        flag = _flag_of(violation.field, fields)
        named = named or flag is not None
        where = flag or violation.field
        described.append(f"{where}: {violation.description}" if where else violation.description)
    return "; ".join(described) if named else None


def _flag_of(field: str, fields: Mapping[str, str]) -> str | None:
    if field in fields:
        return fields[field]
    within = [key for key in fields if field.startswith(key) and field[len(key)] in ".["]
    if not within:
        return None
    return f"{fields[max(within, key=len)]} ({field})"


def add_allow_unqualified_option(
    parser: argparse.ArgumentParser, group: argparse._ArgumentGroup, command: str, what: str
) -> None:
    """--allow-unqualified-judges, the same for every command that can insist on such judges;
    `command` is named when the server refuses a judge for want of it."""
    group.add_argument(
        "--allow-unqualified-judges",
        action="store_true",
        help="use judges even where their latest qualification (tierank qualify) found them"
        f" no better than chance; without it such {what} is refused",
    )
    parser.set_defaults(unqualified_hint=f"tierank {command} --allow-unqualified-judges")


def error_text(error: TierankError, args: argparse.Namespace) -> str:
    """A failed call in the command line's words: field violations named by the flags that set
    the fields, and a refused judge with the flag (and command) that insists on it."""
    if error.code == grpc.StatusCode.INVALID_ARGUMENT:
        named = in_flag_words(error.field_violations, getattr(args, "field_flags", {}))
        if named is not None:
            return named
    hint = getattr(args, "unqualified_hint", None)
    if error.error_info is not None and error.error_info.reason == JUDGE_NOT_QUALIFIED and hint:
        return f"{error.describe()}: `{hint}`"
    return error.describe()


def add_reconnect_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--reconnect-for",
        type=positive_float,
        default=DEFAULT_RECONNECT_WINDOW_SECONDS,
        metavar="SECONDS",
        help="when the connection is lost (a server restart), keep resuming the event stream"
        " this long, with backoff, before giving up with the command that resumes it"
        f" (default {DEFAULT_RECONNECT_WINDOW_SECONDS:g})",
    )


def watch_command(job: str, after: int, args: argparse.Namespace) -> str:
    """The command that follows `job` on from event `after`, on the same server."""
    return f"tierank watch {job} --after {after}{same_server(args)}"


def same_server(args: argparse.Namespace) -> str:
    """The options that reach this command's server again: its --server, or its --db."""
    if args.server:
        return f" --server {args.server}"
    return f" --db {args.db}" if args.db else ""


def stream_stopped(
    error: TierankError, job: str, after: int, args: argparse.Namespace
) -> Exception:
    """A followed event stream that stopped before the job's end, as one line with the command
    that resumes it: --timeout ran out, or the server stayed away for --reconnect-for."""
    if error.code == grpc.StatusCode.DEADLINE_EXCEEDED and args.timeout is not None:
        why = f"stopped after --timeout {args.timeout:g}s"
        return goes_on(why, job, after, args, EXIT_TIMED_OUT)
    if error.code == grpc.StatusCode.UNAVAILABLE:
        return CommandError(
            f"lost the server for {args.reconnect_for:g}s (--reconnect-for); once it is back,"
            f" follow {job} with `{watch_command(job, after, args)}`"
        )
    return error


def goes_on(
    why: str, job: str, after: int, args: argparse.Namespace, exit_code: int
) -> CommandError:
    """The command stopped following `job`, which goes on: how to follow it, or stop it."""
    where = f" at {args.server}" if args.server else ""
    return CommandError(
        f"{why}; {job} goes on{where}: follow it with `{watch_command(job, after, args)}`,"
        f" or stop it with `tierank cancel {job}{same_server(args)}`",
        exit_code,
    )


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def judge_argument(text: str) -> rank_pb2.JudgeSpec:
    """argparse type for a judge string (`--judge`, `--anchor-judge`): see `parse_judge`."""
    try:
        return parse_judge(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def table_console() -> Console:
    """Standard output for tables: the terminal's width, or a wide fixed one in a pipe."""
    console = Console(highlight=False)
    return fit_console(console, on_terminal=console.is_terminal)


# -- what every command that ranks takes (`rank`, `study run`), declared once ----------------


def add_judging_options(group: argparse._ArgumentGroup, *, top_k_help: str) -> None:
    """The judges and how they are asked: the flags of a JobSpec (`ranking_spec` reads them)."""
    group.add_argument(
        "--judge",
        dest="judges",
        action="append",
        type=judge_argument,
        metavar=JUDGE_SYNTAX,
        help="a judge, repeatable (default: lexical); e.g. oracle, openai:gpt-4.1-mini,"
        f" 'openai-compatible:qwen?temperature=0&weight=2'. Keys: {', '.join(JUDGE_KEYS)};"
        " any other key is a provider option (e.g. noise=0 for oracle). weight=qualified"
        " takes the weight from the judge's latest `tierank qualify`",
    )
    group.add_argument(
        "--k",
        type=positive_int,
        help=f"candidates per judge call ({limits.MIN_BATCH_SIZE}-{limits.MAX_BATCH_SIZE},"
        f" server default {limits.DEFAULT_BATCH_SIZE})",
    )
    group.add_argument("--top-k", type=int, default=0, help=top_k_help)
    group.add_argument(
        "--max-in-flight",
        type=positive_int,
        help="judge calls in flight for each job"
        f" (at most {limits.MAX_IN_FLIGHT}, server default {limits.DEFAULT_JOB_MAX_IN_FLIGHT})",
    )
    group.add_argument(
        "--seed", type=int, default=0, help="seed for batches and shuffles (default 0)"
    )
    group.add_argument(
        "--ensemble",
        choices=sorted(ENSEMBLE_MODES),
        default="all",
        help="ask every judge, or extra judges only where the first ones disagree (default all)",
    )
    group.add_argument(
        "--quorum",
        type=positive_int,
        help=f"judges in the first quorum (adaptive; server default {limits.DEFAULT_QUORUM})",
    )
    group.add_argument(
        "--samples",
        type=positive_int,
        default=1,
        help="ask every judge N times per batch, each time in its own shuffle, as judges "
        "NAME#1..NAME#N (self-consistency for unreliable judges; best with --ensemble "
        "adaptive; default 1)",
    )


def ranking_spec(
    args: argparse.Namespace,
    query: str,
    candidates: Sequence[rank_pb2.Candidate],
    rubric: str,
) -> rank_pb2.JobSpec:
    """The JobSpec of `add_judging_options`' flags (and --allow-unqualified-judges), with no
    budget: a job's is its own (`budget_options`), a study's is the study's."""
    return job_spec(
        query,
        candidates,
        judges=args.judges or ["lexical"],
        rubric=rubric,
        batch_size=args.k,
        top_k=args.top_k,
        max_in_flight=args.max_in_flight,
        seed=args.seed,
        ensemble=args.ensemble,
        quorum=args.quorum,
        samples_per_judge=args.samples,
        allow_unqualified_judges=args.allow_unqualified_judges,
    )


def add_budget_options(group: argparse._ArgumentGroup, scope: str) -> None:
    """--max-calls, --max-input-tokens, --max-cost and --deadline, of `scope` (a job, a study,
    a round)."""
    group.add_argument(
        "--max-calls", type=int, default=0, help=f"{scope} judge call budget (0: unlimited)"
    )
    group.add_argument(
        "--max-input-tokens",
        type=int,
        default=0,
        help=f"{scope} input token budget (0: unlimited)",
    )
    group.add_argument(
        "--max-cost", type=float, default=0.0, help=f"{scope} cost budget in USD (0: unlimited)"
    )
    group.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        help=f"{scope} deadline in seconds (0: none); what is still running then ends"
        " deadline_exceeded",
    )


def budget_options(args: argparse.Namespace) -> tuple[rank_pb2.Budget, float]:
    """The budget and the deadline (seconds) of `add_budget_options`' flags."""
    for flag, value, zero in (
        ("--max-calls", args.max_calls, "unlimited"),
        ("--max-input-tokens", args.max_input_tokens, "unlimited"),
        ("--max-cost", args.max_cost, "unlimited"),
        ("--deadline", args.deadline, "none"),
    ):
        if not 0 <= value < float("inf"):
            raise UsageError(f"{flag} must be a number, 0 or more (0: {zero})")
    budget = rank_pb2.Budget(
        max_judge_calls=args.max_calls,
        max_input_tokens=args.max_input_tokens,
        max_cost_usd=args.max_cost,
    )
    return budget, args.deadline
