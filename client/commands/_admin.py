"""What `tierank keys`, `tenants` and `usage` share: where the AdminService is, its calls, and
the renderings of its messages.

An admin command talks either to a running server (--server, with an admin or operator key) or
to the database file itself (--db), with no server running, as the operator: that is how the
first operator key is made.
The client never imports the server, so --db runs the server's admin tool as a child process,
`python -m tierank.server.admin_tool METHOD --db FILE`: the request message as JSON on stdin;
the response message as JSON on stdout and exit status 0, or one line on stderr and status 1.
Both ways return the same response message, rendered by the same code. The embedded server is
no third way: it lasts one command, and a key made there would be of no use to anyone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC
from typing import TypeVar

import grpc
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from rich.text import Text

from tierank.client._errors import error_from_rpc
from tierank.client.commands._shared import (
    EXIT_USAGE,
    SERVER_ENV,
    CommandError,
    UsageError,
    add_security_options,
    add_server_option,
    refuse_security_flags,
    remote_security,
    wait_for_server,
)
from tierank.client.local_server import failure_reason
from tierank.v1 import admin_pb2, admin_pb2_grpc

ADMIN_TOOL_COMMAND = (sys.executable, "-m", "tierank.server.admin_tool")
FORMATS = ("text", "json")
_TOOL_PREFIX = "tierank: "
_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
_Answer = TypeVar("_Answer", bound=Message)
KEY_NAME_PREFIX = "keys/"
TENANT_NAME_PREFIX = "tenants/"


def add_admin_options(parser: argparse.ArgumentParser) -> None:
    """--server or --db (one of them), the security options, --timeout and --format."""
    parser.add_argument(
        "--format", choices=FORMATS, default="text", help="output format (default text)"
    )
    where = parser.add_argument_group("where (one of --server and --db)")
    add_server_option(where, "; needs an admin or operator key")
    where.add_argument(
        "--db",
        metavar="FILE_OR_URL",
        help="work on this database directly (a SQLite file, or a postgresql:// URL), with no"
        " server running, as the operator (how the first operator key is made)",
    )
    add_security_options(where)
    where.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the answer (default 30)"
    )


def admin_call(
    args: argparse.Namespace, method: str, request: Message, answer: type[_Answer]
) -> _Answer:
    """One AdminService call on --server or, with --db, through the server's admin tool;
    `answer` is the method's response type."""
    output = _SERVICE.methods_by_name[method].output_type
    assert output.full_name == answer.DESCRIPTOR.full_name, f"{method} answers {output.name}"
    if args.db:
        refuse_security_flags(args, "--db works on the file, with no server")
        return _through_admin_tool(args.db, method, request, answer, args.timeout)
    # --server, or $TIERANK_SERVER without --db (settle_server).
    server = args.server
    if not server:
        raise UsageError(
            f"say where: --server HOST:PORT (or ${SERVER_ENV}) for a running server, or --db"
            " FILE to work on a database with no server running"
        )
    connection = wait_for_server(server, remote_security(args))
    with connection.channel() as channel:
        try:
            response = getattr(admin_pb2_grpc.AdminServiceStub(channel), method)(
                request, timeout=args.timeout
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error, server) from None
    assert isinstance(response, answer)
    return response


def _through_admin_tool(
    db: str, method: str, request: Message, response_class: type[_Answer], timeout: float
) -> _Answer:
    # The request goes on stdin, never in argv, where a provider key would show in `ps`.
    try:
        done = subprocess.run(
            [*ADMIN_TOOL_COMMAND, method, "--db", str(db)],
            input=json_format.MessageToJson(request),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise CommandError(f"the admin tool did not answer in {timeout:g}s") from None
    if done.returncode != 0:
        # The tool's stderr may hold audit lines before its one-line reason, which it words
        # as "tierank: ..." like every tierank program: this command's name goes there instead.
        reason = failure_reason(done.stderr) if done.stderr.strip() else "no reason given"
        reason = reason.removeprefix(_TOOL_PREFIX)
        if done.returncode == EXIT_USAGE:  # the tool refused an argument: --db
            raise UsageError(reason)
        raise CommandError(reason if done.returncode == 1 else f"admin tool failed: {reason}")
    try:
        return json_format.Parse(done.stdout, response_class(), ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise CommandError(
            f"the admin tool's answer is not a {response_class.DESCRIPTOR.name}: {error}"
        ) from None


def key_id(name: str) -> str:
    """ "abc" of "keys/abc": what `keys revoke` takes, and what tables show."""
    return name.removeprefix(KEY_NAME_PREFIX)


def key_name(key_id: str) -> str:
    """Accept "keys/abc" or just "abc"."""
    return key_id if key_id.startswith(KEY_NAME_PREFIX) else KEY_NAME_PREFIX + key_id


def tenant_id(name: str) -> str:
    """ "team-a" of "tenants/team-a" (the RPCs take the id; messages carry the name)."""
    return name.removeprefix(TENANT_NAME_PREFIX)


def role_name(role: int) -> str:
    """ "admin" for ROLE_ADMIN."""
    return admin_pb2.Role.Name(role).removeprefix("ROLE_").lower()


def timestamp_json(message: Message, field: str) -> str | None:
    return getattr(message, field).ToJsonString() if message.HasField(field) else None


def timestamp_text(message: Message, field: str) -> str:
    """ "2025-06-01 14:03" (UTC), or empty when unset."""
    if not message.HasField(field):
        return ""
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return stamp.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%d %H:%M")


def quota_fields() -> list[FieldDescriptor]:
    # The fields of the file's descriptor: a message's DESCRIPTOR is typed as either the pure
    # Python or the upb descriptor (the same objects at run time).
    return list(admin_pb2.DESCRIPTOR.message_types_by_name["Quota"].fields)


def limit_flag(field: FieldDescriptor) -> str:
    """ "daily-cost-usd": the field as `tenants set` names it (--daily-cost-usd)."""
    return field.name.replace("_", "-")


def quota_json(quota: admin_pb2.Quota) -> dict[str, float | int | None]:
    """Every limit, None where there is none."""
    return {
        f.name: getattr(quota, f.name) if quota.HasField(f.name) else None for f in quota_fields()
    }


def limit_text(quota: admin_pb2.Quota, field: FieldDescriptor) -> str:
    """ "12", "$2.5" or "no limit"."""
    if not quota.HasField(field.name):
        return "no limit"
    return _number(quota, field, dollars=True)


def quota_summary(quota: admin_pb2.Quota) -> str:
    """The limits that are set, as "max-concurrent-jobs=4 daily-cost-usd=10"; "none" if none."""
    limits = [
        f"{limit_flag(f)}={_number(quota, f, dollars=False)}"
        for f in quota_fields()
        if quota.HasField(f.name)
    ]
    return " ".join(limits) or "none"


def _number(quota: admin_pb2.Quota, field: FieldDescriptor, *, dollars: bool) -> str:
    value = getattr(quota, field.name)
    if field.type != FieldDescriptor.TYPE_DOUBLE:
        return str(value)
    return f"${value:g}" if dollars else f"{value:g}"


def print_json(value: object) -> None:
    json.dump(value, sys.stdout, indent=2)
    print()


def plain(*cells: str) -> tuple[Text, ...]:
    """Table cells as they are: a label like "alice [laptop]" is not rich markup."""
    return tuple(Text(cell) for cell in cells)


def yes_no(value: bool) -> str:
    return "yes" if value else "no"
