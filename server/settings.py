"""Server configuration, each setting declared once: a field of `ServerSettings` carries its
flag, environment variable, default, check and help. From those declarations come the command
line of `tierank serve` (`python -m tierank.server`), the environment's values, the dataclass's
defaults and the table of settings in README.md (`scripts/settings_table.py` writes it).

A flag wins over its variable, an empty variable counts as unset, and a variable passes exactly
the checks its flag does: a bad one stops the start with one line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NoReturn

from tierank.addresses import parse_address
from tierank.server.judges.settings import CONFIG_PATH_ENV
from tierank.server.rpc.auth import AUTH_KEYS, AUTH_NONE
from tierank.server.storage.by_url import PoolSettings, check_location
from tierank.server.tenancy.sealing import SECRET_KEY_ENV

# The key under which a ServerSettings field's metadata holds its Declaration.
_DECLARED = "tierank.server.setting"
# What a switch's variable accepts (its flag takes no value).
_SWITCH_ON = frozenset({"1", "true", "yes", "on"})
_SWITCH_OFF = frozenset({"0", "false", "no", "off"})


def default_db_path() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tierank" / "tierank.db"


# -- checks: a setting's text (a flag's or a variable's) to its value, or ValueError naming the
# rule; the same function serves both, so that neither can let through what the other refuses.


def _listen_address(text: str) -> str:
    """host:port with a port of 0-65535."""
    parse_address(text, listening=True)
    return text


def _optional_listen_address(text: str) -> str:
    """--metrics-listen: empty turns metrics off."""
    return _listen_address(text) if text else text


def _optional_collector(text: str) -> str:
    """--otlp-endpoint: empty, or an OTLP/gRPC collector's http(s)://host:port."""
    if not text:
        return text
    scheme, separator, rest = text.partition("://")
    if not separator or scheme not in ("http", "https"):
        raise ValueError(f"must be http://HOST:PORT or https://HOST:PORT, not {text!r}")
    parse_address(rest.rstrip("/"), listening=False)
    return text


def _optional_path(text: str) -> Path | None:
    """An empty value is no path, not "."."""
    return Path(text) if text.strip() else None


@dataclass(frozen=True)
class Number:
    """A whole number (`whole`) or any finite number, at least `low` and at most `high`."""

    low: float
    high: float | None = None
    whole: bool = False

    @property
    def bounds(self) -> str:
        """The range, for --help and the docs; empty when only the lower bound holds."""
        return f"{self.low:g}–{self.high:g}" if self.high is not None else ""

    def __call__(self, text: str) -> float:
        kind = "a whole number" if self.whole else "a number"
        within = f"from {self.low:g} to {self.high:g}" if self.high is not None else ""
        rule = f"must be {kind} {within or f'of {self.low:g} or more'}"
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            raise ValueError(f"{rule}, not {text!r}") from None
        too_high = self.high is not None and value > self.high
        if not math.isfinite(value) or value < self.low or too_high:
            raise ValueError(f"{rule}, not {text!r}")
        return value


@dataclass(frozen=True)
class Choice:
    """One of `options`, as written (case matters, as it does for every flag)."""

    options: tuple[str, ...]

    def __call__(self, text: str) -> str:
        if text not in self.options:
            raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(self.options)})")
        return text


_ON_OFF = Choice(("on", "off"))


def _on_off(text: str) -> bool:
    return _ON_OFF(text) == "on"


def _switch(text: str) -> bool:
    """A switch's variable (its flag takes no value)."""
    word = text.strip().lower()
    if word not in _SWITCH_ON | _SWITCH_OFF:
        raise ValueError(f"must be 1 or 0 (or true/false, yes/no, on/off), not {text!r}")
    return word in _SWITCH_ON


@dataclass(frozen=True)
class Declaration:
    """One setting, as the command line, the environment and the docs know it. `help` and
    `details` are Markdown; --help shows `help` without its backticks, the docs both."""

    flag: str
    env: str
    check: Callable[[str], Any]
    help: str
    metavar: str
    # Markdown; empty until `declarations()` shows the field's default as it is typed.
    shown_default: str
    details: str = ""

    @property
    def switch(self) -> bool:
        """A flag without a value (store_true), whose variable takes 1 or 0."""
        return self.check is _switch

    @property
    def summary(self) -> str:
        """What --help says: the help and, for a number, its range."""
        bounds = self.check.bounds if isinstance(self.check, Number) else ""
        return f"{self.help} ({bounds})" if bounds else self.help

    @property
    def meaning(self) -> str:
        """What the docs say: the summary and the details."""
        return f"{self.summary}; {self.details}" if self.details else self.summary


def declared(
    flag: str,
    env: str,
    *,
    check: Callable[[str], Any],
    help: str,
    shown_default: str | None = None,
    details: str = "",
    metavar: str | None = None,
) -> dict[str, Declaration]:
    """A ServerSettings field's metadata: the declaration of its setting. Its default is shown
    as it is typed unless `shown_default` (Markdown) says it otherwise."""
    metavar = metavar or _metavar(flag, check)
    shown = shown_default or ""
    return {_DECLARED: Declaration(flag, env, check, help, metavar, shown, details)}


def _typed(value: object) -> str:
    """A default as one would write it on the command line."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _metavar(flag: str, check: Callable[[str], Any]) -> str:
    """The options of a choice, as argparse shows them; else the flag's name."""
    if check is _on_off:
        check = _ON_OFF
    if isinstance(check, Choice):
        return "{" + ",".join(check.options) + "}"
    return flag.removeprefix("--").upper().replace("-", "_")


@dataclass(frozen=True)
class ServerSettings:
    listen: str = field(
        default="127.0.0.1:50051",
        metadata=declared(
            "--listen",
            "TIERANK_LISTEN",
            check=_listen_address,
            metavar="HOST:PORT",
            help="gRPC address `HOST:PORT` (`[::1]:PORT` for IPv6; port 0–65535, 0 picks a free "
            "one)",
            details="one that is not `HOST:PORT` is refused with one line (exit 2); a host that "
            "does not resolve or an address in use stops the start with one line naming it "
            "(exit 1), never a second server sharing the port",
        ),
    )
    # A SQLite path (or sqlite:///path) or a postgresql:// URL, refused before anything is opened
    # or created when it cannot name a database (the message never repeats the value, which may
    # hold a password). Read as text: a Path would fold the "//" of a postgresql:// URL.
    db: str | Path = field(
        default_factory=lambda: str(default_db_path()),
        metadata=declared(
            "--db",
            "TIERANK_DB",
            shown_default="`$XDG_DATA_HOME/tierank/tierank.db`",
            check=check_location,
            metavar="FILE_OR_URL",
            help="SQLite file (a path or `sqlite:///path`), or a PostgreSQL URL "
            "`postgresql://user[:password]@host:port/db`",
            details="one server per SQLite file, whatever name (symlink, hard link) reaches it: a "
            "second one refuses to start. One that names no database (empty, another scheme, an "
            "unreadable URL) is refused with one line (exit 2), one that cannot be opened (a "
            "directory, not a database, no permission) stops the start with one line (exit 1)",
        ),
    )
    db_pool_size: int = field(
        default=10,
        metadata=declared(
            "--db-pool-size",
            "TIERANK_DB_POOL_SIZE",
            check=Number(1, whole=True),
            metavar="N",
            help="PostgreSQL: connections the server keeps",
        ),
    )
    db_statement_timeout_s: float = field(
        default=30.0,
        metadata=declared(
            "--db-statement-timeout",
            "TIERANK_DB_STATEMENT_TIMEOUT",
            check=Number(0),
            metavar="SECONDS",
            help="PostgreSQL: seconds one statement may run (0: no limit)",
        ),
    )
    # A replica that dies (kill -9) has its jobs taken over once its leases expire: at most this
    # long, plus one tick. Renewed every quarter of it, at most once a second: below 2 s one slow
    # round trip to the database could cost a replica its jobs.
    lease_s: float = field(
        default=8.0,
        metadata=declared(
            "--lease-seconds",
            "TIERANK_LEASE_SECONDS",
            check=Number(2, 3600),
            metavar="SECONDS",
            help="PostgreSQL: how long a replica's hold on a job or a study outlives its last "
            "renewal, so how soon a dead replica's jobs and studies move on",
        ),
    )
    sqlite_synchronous: str = field(
        default="FULL",
        metadata=declared(
            "--sqlite-synchronous",
            "TIERANK_SQLITE_SYNCHRONOUS",
            check=Choice(("FULL", "NORMAL")),
            help="`FULL`: a commit survives power loss; `NORMAL`: survives process crashes only",
        ),
    )
    judges_config: Path | None = field(
        default=None,
        metadata=declared(
            "--judges-config",
            CONFIG_PATH_ENV,
            check=_optional_path,
            metavar="FILE",
            help="provider settings file (limits, prices, base URLs)",
            details="a missing or invalid file (bad JSON/TOML, an unknown key, a wrong type) stops "
            "the start with one line naming the file and the problem (exit 1)",
        ),
    )
    # gRPC's limits are 32-bit signed: the transport ceiling (2x + 1 MiB) must stay below 2 GiB.
    max_message_mb: int = field(
        default=64,
        metadata=declared(
            "--max-message-mb",
            "TIERANK_MAX_MESSAGE_MB",
            check=Number(1, 1000, whole=True),
            metavar="MIB",
            help="largest request or response, in MiB",
        ),
    )
    shutdown_grace_s: float = field(
        default=10.0,
        metadata=declared(
            "--shutdown-grace",
            "TIERANK_SHUTDOWN_GRACE",
            check=Number(0),
            metavar="SECONDS",
            help="seconds to let judge calls in flight land on shutdown (calls waiting for a "
            "provider batch are not waited for: they wait again, unpaid, when their job resumes)",
        ),
    )
    metrics_listen: str = field(
        default="",
        metadata=declared(
            "--metrics-listen",
            "TIERANK_METRICS_LISTEN",
            shown_default="off",
            check=_optional_listen_address,
            metavar="HOST:PORT",
            help="`host:port` for Prometheus metrics over HTTP (port 0 picks a free one: the "
            "`serving` log line's `metrics_address` and the ready file say which)",
        ),
    )
    otlp_endpoint: str = field(
        default="",
        metadata=declared(
            "--otlp-endpoint",
            "TIERANK_OTLP_ENDPOINT",
            shown_default="off",
            check=_optional_collector,
            metavar="URL",
            help="OTLP/gRPC collector for OpenTelemetry traces, e.g. `http://127.0.0.1:4317` "
            "(`https://` for TLS); `OTEL_EXPORTER_OTLP_ENDPOINT` turns them on too, and the other "
            "`OTEL_*` variables apply ([docs/operations.md](docs/operations.md): what is traced, "
            "the metrics, the Grafana dashboard)",
        ),
    )
    trace_content: bool = field(
        default=False,
        metadata=declared(
            "--trace-content",
            "TIERANK_TRACE_CONTENT",
            check=_on_off,
            help="`on`: judge-call spans carry prompts (query, rubric, passages) and answers "
            "(so does `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the GenAI "
            "instrumentations' variable); `off`: no text is in any span",
        ),
    )
    ready_file: Path | None = field(
        default=None,
        metadata=declared(
            "--ready-file",
            "TIERANK_READY_FILE",
            check=_optional_path,
            metavar="FILE",
            help="write the bound `host:port` here once serving, on its own line (so `$(cat FILE)` "
            "is the address); with `--metrics-listen`, the metrics `host:port` on a second line",
        ),
    )
    log_level: str = field(
        default="info",
        metadata=declared(
            "--log-level",
            "TIERANK_LOG_LEVEL",
            check=Choice(("debug", "info", "warning", "error")),
            help="the least that is logged: `debug`, `info`, `warning` or `error`",
        ),
    )
    log_format: str = field(
        default="json",
        metadata=declared(
            "--log-format",
            "TIERANK_LOG_FORMAT",
            check=Choice(("json", "console")),
            help="`json`: structlog JSON lines on stderr (job, tenant and request ids bound; "
            "libraries' warnings, e.g. psycopg's, as JSON lines too); `console`: the same as plain "
            "lines",
        ),
    )
    auth: str = field(
        default=AUTH_NONE,
        metadata=declared(
            "--auth",
            "TIERANK_AUTH",
            check=Choice((AUTH_NONE, AUTH_KEYS)),
            help="`keys`: every call needs an API key (`authorization: Bearer`; reflection too, "
            "health checking never); `none`: every caller is the operator, in tenant `default`, "
            "allowed only on a loopback address",
        ),
    )
    allow_unauthenticated: bool = field(
        default=False,
        metadata=declared(
            "--allow-unauthenticated",
            "TIERANK_ALLOW_UNAUTHENTICATED",
            check=_switch,
            help="serve `--auth none` on an address others can reach (anyone who reaches it reads "
            "every job and spends the provider keys); its variable takes `1` or `0`",
        ),
    )
    # None: on without authentication, off with it (what reflection shows helps an attacker).
    reflection: bool | None = field(
        default=None,
        metadata=declared(
            "--reflection",
            "TIERANK_REFLECTION",
            shown_default="on without auth, off with",
            check=_on_off,
            help="gRPC server reflection, `on` or `off`; with `--auth keys` it needs a key when on",
        ),
    )
    tls_cert: Path | None = field(
        default=None,
        metadata=declared(
            "--tls-cert",
            "TIERANK_TLS_CERT",
            check=_optional_path,
            metavar="FILE",
            help="PEM certificate chain to serve TLS with; needs `--tls-key`",
        ),
    )
    tls_key: Path | None = field(
        default=None,
        metadata=declared(
            "--tls-key",
            "TIERANK_TLS_KEY",
            check=_optional_path,
            metavar="FILE",
            help="PEM private key of `--tls-cert`",
        ),
    )
    tls_client_ca: Path | None = field(
        default=None,
        metadata=declared(
            "--tls-client-ca",
            "TIERANK_TLS_CLIENT_CA",
            check=_optional_path,
            metavar="FILE",
            help="PEM CA bundle: clients must present a certificate it signed (mutual TLS)",
        ),
    )
    resume_jobs: bool = field(
        default=True,
        metadata=declared(
            "--resume-jobs",
            "TIERANK_RESUME_JOBS",
            check=_on_off,
            help="`on`: run every unfinished job found in the database (after a restart, or a "
            "replica's death); `off`: only the jobs created on this server, leaving the others as "
            "they are (the CLI's embedded server but for `watch`, so that no command resumes "
            "paid work unseen)",
        ),
    )
    stdin_eof: str = field(
        default="ignore",
        metadata=declared(
            "--stdin-eof",
            "TIERANK_STDIN_EOF",
            check=Choice(("ignore", "stop")),
            help="`stop`: shut down as on SIGTERM once standard input reaches its end, so that a "
            "server started with a pipe from its parent as standard input ends with that parent "
            "however the parent ends, `kill -9` included (the CLI's embedded server); `ignore`: "
            "standard input is not read",
        ),
    )

    @property
    def pool(self) -> PoolSettings:
        return PoolSettings(self.db_pool_size, self.db_statement_timeout_s)

    @property
    def stops_at_stdin_eof(self) -> bool:
        return self.stdin_eof == "stop"

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


@dataclass(frozen=True)
class EnvironmentOnly:
    """A variable the server reads that has no flag: a secret, kept out of the process list."""

    env: str
    help: str
    shown_default: str = "none"


ENVIRONMENT_ONLY = (
    EnvironmentOnly(
        SECRET_KEY_ENV,
        "a Fernet key (`python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`) that encrypts tenants' own provider keys in "
        "the database; needed only for them",
    ),
)


def declarations() -> Iterator[tuple[str, Declaration]]:
    """Each setting's ServerSettings field name and declaration, in the order of the fields."""
    for each in fields(ServerSettings):
        setting: Declaration = each.metadata[_DECLARED]
        if not setting.shown_default:
            shown = "none" if each.default is None else f"`{_typed(each.default)}`"
            setting = replace(setting, shown_default=shown)
        yield each.name, setting


def declaration(name: str) -> Declaration:
    return dict(declarations())[name]


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, "tierank: " and the flag and the problem (exit status 2), like
    every other reason a tierank program stops, not the whole usage: the flags are many, and
    the line that says what is wrong would scroll away. (The command line runs these programs
    for its own commands too, whose usage is not this one.)"""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tierank: {message}\n")


def _plain(markdown: str) -> str:
    """Markdown for --help: no backticks, and argparse's % escaped."""
    return markdown.replace("`", "").replace("%", "%%")


def add_settings(parser: argparse.ArgumentParser, names: list[str] | None = None) -> None:
    """The flags of the settings `names` (all by default). Their values are in the parsed
    namespace only where given: `given_settings` adds the environment's."""
    for name, setting in declarations():
        if names is not None and name not in names:
            continue
        help_text = f"{_plain(setting.summary)} (default {_plain(setting.shown_default)}; "
        help_text += f"env {setting.env})"
        takes: dict[str, Any] = (
            {"action": "store_true"}
            if setting.switch
            else {"type": _argparse_type(setting.check), "metavar": setting.metavar}
        )
        parser.add_argument(
            setting.flag, dest=name, default=argparse.SUPPRESS, help=help_text, **takes
        )


def _argparse_type(check: Callable[[str], Any]) -> Callable[[str], Any]:
    def checked(text: str) -> Any:
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return checked


def given_settings(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    environ: Mapping[str, str],
    names: list[str] | None = None,
) -> dict[str, Any]:
    """The settings `names` (all by default) that a flag or else a variable gives, checked the
    same way; a variable that fails its check ends the program as a bad flag does."""
    values: dict[str, Any] = {}
    for name, setting in declarations():
        if names is not None and name not in names:
            continue
        if hasattr(args, name):
            values[name] = getattr(args, name)
        elif text := environ.get(setting.env):
            try:
                values[name] = setting.check(text)
            except ValueError as error:
                parser.error(f"environment variable {setting.env}: {error}")
    return values


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tierank serve",
        description="Run the tierank gRPC server (RankService, health, reflection).",
        epilog="Each flag can be set by its environment variable instead; a flag wins over its "
        "variable, an empty variable counts as unset.",
    )
    add_settings(p)
    return p


def from_args(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> ServerSettings:
    """The settings of a command line (the process's own by default), each one not on it taken
    from `environ` (the process's environment by default), else its default."""
    p = parser()
    args = p.parse_args(argv)
    return ServerSettings(**given_settings(p, args, os.environ if environ is None else environ))


def markdown_table() -> str:
    """The table of settings in README.md."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for _, setting in declarations():
        rows.append(
            f"| `{setting.flag}` | `{setting.env}` | {setting.shown_default} | {setting.meaning} |"
        )
    for variable in ENVIRONMENT_ONLY:
        rows.append(f"| | `{variable.env}` | {variable.shown_default} | {variable.help} |")
    return "\n".join(rows) + "\n"
