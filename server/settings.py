"""Server configuration: every flag has an environment variable, and both are documented here.

| flag | environment | default | meaning |
|---|---|---|---|
| --listen | TIERANK_LISTEN | 127.0.0.1:50051 | address to serve gRPC on (port 0 picks a free one) |
| --db | TIERANK_DB | $XDG_DATA_HOME/tierank/tierank.db | SQLite path or postgresql:// URL |
| --db-pool-size | TIERANK_DB_POOL_SIZE | 10 | PostgreSQL connections per server |
| --db-statement-timeout | TIERANK_DB_STATEMENT_TIMEOUT | 30 | PostgreSQL: seconds per statement |
| --lease-seconds | TIERANK_LEASE_SECONDS | 8 | PostgreSQL: a dead replica's jobs move after it |
| --sqlite-synchronous | TIERANK_SQLITE_SYNCHRONOUS | FULL | FULL or NORMAL |
| --judges-config | TIERANK_JUDGES_CONFIG | (none) | provider limits, prices, base URLs |
| --max-message-mb | TIERANK_MAX_MESSAGE_MB | 64 | largest request or response message (1..1000) |
| --shutdown-grace | TIERANK_SHUTDOWN_GRACE | 10 | seconds to let calls in flight land on shutdown |
| --metrics-listen | TIERANK_METRICS_LISTEN | (off) | host:port for Prometheus metrics |
| --otlp-endpoint | TIERANK_OTLP_ENDPOINT | (off) | OTLP/gRPC collector for traces |
| --trace-content | TIERANK_TRACE_CONTENT | off | prompts and answers in judge-call spans |
| --ready-file | TIERANK_READY_FILE | (none) | once serving, the bound host:port (metrics' next) |
| --log-level | TIERANK_LOG_LEVEL | info | debug, info, warning or error |
| --log-format | TIERANK_LOG_FORMAT | json | json or console |
| --auth | TIERANK_AUTH | none | none (loopback only) or keys: every call needs an API key |
| --allow-unauthenticated | TIERANK_ALLOW_UNAUTHENTICATED | off | serve --auth none off loopback |
| --reflection | TIERANK_REFLECTION | on without auth, off with | server reflection on or off |
| --tls-cert | TIERANK_TLS_CERT | (none) | PEM certificate chain; with --tls-key serves TLS |
| --tls-key | TIERANK_TLS_KEY | (none) | PEM private key of --tls-cert |
| --tls-client-ca | TIERANK_TLS_CLIENT_CA | (none) | PEM CA; clients need a certificate it signed |
| (none) | TIERANK_SECRET_KEY | (none) | Fernet key that encrypts tenants' provider keys at rest |
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tierank.addresses import parse_address
from tierank.server.jobs.replica import DEFAULT_LEASE_S
from tierank.server.rpc.auth import AUTH_KEYS, AUTH_NONE
from tierank.server.storage.by_url import PoolSettings, check_location


def default_db_path() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tierank" / "tierank.db"


@dataclass(frozen=True)
class ServerSettings:
    listen: str = "127.0.0.1:50051"
    # A SQLite path (or sqlite:///path) or a postgresql:// URL.
    db: str | Path = Path("tierank.db")
    db_pool_size: int = 10
    db_statement_timeout_s: float = 30.0
    lease_s: float = DEFAULT_LEASE_S
    sqlite_synchronous: str = "FULL"
    judges_config: Path | None = None
    max_message_mb: int = 64
    shutdown_grace_s: float = 10.0
    metrics_listen: str = ""
    # Empty: traces go where OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT says, or nowhere.
    otlp_endpoint: str = ""
    trace_content: bool = False
    ready_file: Path | None = None
    log_level: str = "info"
    log_format: str = "json"
    auth: str = AUTH_NONE
    allow_unauthenticated: bool = False
    # None: on without authentication, off with it (what reflection shows helps an attacker).
    reflection: bool | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    resume_jobs: bool = True

    @property
    def pool(self) -> PoolSettings:
        return PoolSettings(self.db_pool_size, self.db_statement_timeout_s)

    @property
    def serves_reflection(self) -> bool:
        return self.reflection if self.reflection is not None else self.auth == AUTH_NONE

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024

    @property
    def transport_limit_bytes(self) -> int:
        """What gRPC itself accepts: above the limit, so that a request between the two gets
        an answer naming the limit and the flag; only one past this ceiling gets gRPC's bare
        "Received message larger than max"."""
        return 2 * self.max_message_bytes + 1024 * 1024


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, "tierank: " and the flag and the problem (exit status 2), like
    every other reason a tierank program stops, not the whole usage: the flags are many, and
    the line that says what is wrong would scroll away. (The command line runs these programs
    for its own commands too, whose usage is not this one.)"""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tierank: {message}\n")


def database_location(text: str) -> str:
    """argparse type for --db: refused here, before anything is opened or created, when it
    cannot name a database (the message never repeats the value, which may hold a password)."""
    try:
        return check_location(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def listen_address(text: str) -> str:
    """argparse type for --listen and --metrics-listen: host:port with a port of 0-65535."""
    try:
        parse_address(text, listening=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _optional_listen_address(text: str) -> str:
    """--metrics-listen: empty turns metrics off."""
    return listen_address(text) if text else text


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = OneLineParser(
        prog="tierank serve",
        description="Run the tierank gRPC server (RankService, health, reflection).",
    )
    p.add_argument(
        "--listen",
        type=listen_address,
        default=env("TIERANK_LISTEN", "127.0.0.1:50051"),
        help="host:port to serve on; port 0 picks a free port (env TIERANK_LISTEN)",
    )
    p.add_argument(
        "--db",
        type=database_location,
        default=env("TIERANK_DB") or str(default_db_path()),
        help="SQLite database file (a path or sqlite:///path; one server per file), or a "
        "PostgreSQL URL postgresql://user@host:port/db (env TIERANK_DB)",
    )
    p.add_argument(
        "--db-pool-size",
        type=_positive_int,
        default=env("TIERANK_DB_POOL_SIZE", "10"),
        help="PostgreSQL: connections this server keeps (env TIERANK_DB_POOL_SIZE)",
    )
    p.add_argument(
        "--db-statement-timeout",
        type=float,
        default=env("TIERANK_DB_STATEMENT_TIMEOUT", "30"),
        help="PostgreSQL: seconds one statement may run (env TIERANK_DB_STATEMENT_TIMEOUT)",
    )
    p.add_argument(
        "--lease-seconds",
        type=_lease_seconds,
        default=env("TIERANK_LEASE_SECONDS", str(DEFAULT_LEASE_S)),
        help="PostgreSQL: how long a replica's hold on a job outlives its last renewal; a "
        "replica that dies has its jobs taken over after at most this long (2..3600, default "
        f"{DEFAULT_LEASE_S:g}; env TIERANK_LEASE_SECONDS)",
    )
    p.add_argument(
        "--sqlite-synchronous",
        choices=["FULL", "NORMAL"],
        default=env("TIERANK_SQLITE_SYNCHRONOUS", "FULL"),
        help="FULL: a commit survives power loss; NORMAL: only process crashes",
    )
    p.add_argument(
        "--judges-config",
        type=_optional_path,
        default=env("TIERANK_JUDGES_CONFIG"),
        help="provider settings file (rate limits, prices, base URLs)",
    )
    p.add_argument(
        "--max-message-mb",
        type=_message_mb,
        default=env("TIERANK_MAX_MESSAGE_MB", "64"),
        help="largest accepted request / sent response, in MiB, 1..1000 "
        "(env TIERANK_MAX_MESSAGE_MB)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=env("TIERANK_SHUTDOWN_GRACE", "10"),
        help="seconds to let judge calls in flight land before stopping",
    )
    p.add_argument(
        "--metrics-listen",
        type=_optional_listen_address,
        default=env("TIERANK_METRICS_LISTEN", ""),
        help="host:port for Prometheus metrics over HTTP (port 0 picks a free one, logged and"
        " written to --ready-file); empty disables",
    )
    p.add_argument(
        "--otlp-endpoint",
        default=env("TIERANK_OTLP_ENDPOINT", ""),
        help="send OpenTelemetry traces over OTLP/gRPC to this collector, e.g. "
        "http://127.0.0.1:4317 (https:// for TLS); empty: only if OTEL_EXPORTER_OTLP_ENDPOINT "
        "is set; the other OTEL_* variables apply (env TIERANK_OTLP_ENDPOINT)",
    )
    p.add_argument(
        "--trace-content",
        choices=["on", "off"],
        default=env("TIERANK_TRACE_CONTENT")
        or _on_off(env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")),
        help="on: judge-call spans carry the prompts (query, rubric, passages) and answers; "
        "off (default) keeps every text out of traces (env TIERANK_TRACE_CONTENT, else "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)",
    )
    p.add_argument(
        "--ready-file",
        type=_optional_path,
        default=env("TIERANK_READY_FILE"),
        help="write the bound host:port to this file once serving, and the metrics host:port"
        " on a second line with --metrics-listen",
    )
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=env("TIERANK_LOG_LEVEL", "info"),
        help="log level",
    )
    p.add_argument(
        "--log-format",
        choices=["json", "console"],
        default=env("TIERANK_LOG_FORMAT", "json"),
        help="log line format",
    )
    p.add_argument(
        "--auth",
        choices=[AUTH_NONE, AUTH_KEYS],
        default=env("TIERANK_AUTH", AUTH_NONE),
        help="keys: every call needs an API key (authorization: Bearer); none: every caller is "
        "the operator, in tenant 'default', allowed only on loopback (env TIERANK_AUTH)",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        default=_flag(env("TIERANK_ALLOW_UNAUTHENTICATED", "")),
        help="allow --auth none on an address other than loopback: anyone who reaches the port "
        "can read every job and spend the provider keys (env TIERANK_ALLOW_UNAUTHENTICATED=1)",
    )
    p.add_argument(
        "--resume-jobs",
        choices=["on", "off"],
        default=env("TIERANK_RESUME_JOBS", "on"),
        help="on: run every unfinished job found in the database (after a restart, or a "
        "replica's death); off: only the jobs created on this server, leaving the others as "
        "they are (the CLI's embedded server, so that no command resumes paid work unseen) "
        "(env TIERANK_RESUME_JOBS)",
    )
    p.add_argument(
        "--reflection",
        choices=["on", "off"],
        default=env("TIERANK_REFLECTION"),
        help="gRPC server reflection; default on with --auth none, off with --auth keys, "
        "where it needs a key when on (env TIERANK_REFLECTION)",
    )
    p.add_argument(
        "--tls-cert",
        type=_optional_path,
        default=env("TIERANK_TLS_CERT"),
        help="PEM certificate chain to serve TLS with; needs --tls-key (env TIERANK_TLS_CERT)",
    )
    p.add_argument(
        "--tls-key",
        type=_optional_path,
        default=env("TIERANK_TLS_KEY"),
        help="PEM private key for --tls-cert (env TIERANK_TLS_KEY)",
    )
    p.add_argument(
        "--tls-client-ca",
        type=_optional_path,
        default=env("TIERANK_TLS_CLIENT_CA"),
        help="PEM CA bundle: require clients to present a certificate it signed (mutual TLS) "
        "(env TIERANK_TLS_CLIENT_CA)",
    )
    return p


def _optional_path(text: str) -> Path | None:
    """An empty value (an environment variable set to nothing) is no path, not "."."""
    return Path(text) if text.strip() else None


def _lease_seconds(text: str) -> float:
    value = float(text)
    # Renewed every quarter of it, at most once a second: below 2 s one slow round trip to the
    # database could cost a replica its jobs.
    if not 2 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be between 2 and 3600 seconds")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _flag(text: str) -> bool:
    return text.strip().lower() in {"1", "true", "yes", "on"}


def _on_off(text: str) -> str:
    return "on" if _flag(text) else "off"


def _message_mb(text: str) -> int:
    value = int(text)
    # gRPC's limits are 32-bit signed: the transport ceiling (2x + 1 MiB) must stay below 2 GiB.
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000")
    return value


def from_args(argv: list[str] | None = None) -> ServerSettings:
    args = parser().parse_args(argv)
    return ServerSettings(
        listen=args.listen,
        db=args.db,
        db_pool_size=args.db_pool_size,
        db_statement_timeout_s=args.db_statement_timeout,
        lease_s=args.lease_seconds,
        sqlite_synchronous=args.sqlite_synchronous,
        judges_config=args.judges_config,
        max_message_mb=args.max_message_mb,
        shutdown_grace_s=args.shutdown_grace,
        metrics_listen=args.metrics_listen,
        otlp_endpoint=args.otlp_endpoint,
        trace_content=args.trace_content == "on",
        ready_file=args.ready_file,
        log_level=args.log_level,
        log_format=args.log_format,
        auth=args.auth,
        allow_unauthenticated=args.allow_unauthenticated,
        reflection=None if args.reflection is None else args.reflection == "on",
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        resume_jobs=args.resume_jobs == "on",
    )
