"""`python -m tierank.server.admin_tool METHOD --db FILE`: one AdminService call, made directly
on a database with no server running (this is how the first operator key is made).

The request message comes as JSON on stdin and the response goes as JSON to stdout (exit 0); a
failure is one line on stderr (exit 1). The `tierank keys|tenants|usage --db` commands run this,
so that the client never imports server code and both paths share the servicer's rules. Whoever
can write the database file is its administrator: the call runs as the operator.
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio
from google.protobuf import json_format
from google.rpc import code_pb2

from tierank.server.errors import StorageError, TierankError
from tierank.server.logs import configure
from tierank.server.rpc.admin_service import AdminServicer
from tierank.server.rpc.auth import Caller, set_caller
from tierank.server.rpc.statuses import status_of
from tierank.server.settings import OneLineParser, ServerSettings, add_settings, given_settings
from tierank.server.storage.by_url import open_storage
from tierank.server.storage.sqlite import DatabaseLocked
from tierank.server.tenancy.keys import DEFAULT_TENANT, ROLE_OPERATOR
from tierank.server.tenancy.sealing import Sealer, SealingError
from tierank.v1 import admin_pb2

_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
METHODS = tuple(method.name for method in _SERVICE.methods)
_OPERATOR = Caller(DEFAULT_TENANT, ROLE_OPERATOR, origin="database operator")


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m tierank.server.admin_tool",
        description="Make one AdminService call on a database directly (request JSON on stdin).",
    )
    p.add_argument("method", choices=METHODS)
    add_settings(p, ["db"])
    return p


async def call(method: str, settings: ServerSettings, request_json: str) -> str:
    """The call, its request and its response as JSON, as the tool makes it (and tests, in their
    own process, to set a database up)."""
    descriptor = _SERVICE.methods_by_name[method]
    request_type = admin_pb2.DESCRIPTOR.message_types_by_name[descriptor.input_type.name]
    request = json_format.Parse(request_json or "{}", getattr(admin_pb2, request_type.name)())
    storage = await open_storage(
        settings.db, sqlite_synchronous=settings.sqlite_synchronous, pool=settings.pool
    )
    try:
        set_caller(_OPERATOR)
        response = await getattr(AdminServicer(storage, Sealer.from_environment()), method)(
            request, None
        )
    finally:
        await storage.close()
    return json_format.MessageToJson(response, preserving_proto_field_name=True)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    # No server runs: the database (the server's --db) is opened, and the audit line logged (to
    # stderr; stdout carries only the response), as a server with the default settings would.
    settings = ServerSettings(**given_settings(p, args, os.environ, ["db"]))
    configure(settings.log_level, settings.log_format)
    try:
        print(anyio.run(call, args.method, settings, sys.stdin.read()))
    except (json_format.ParseError, DatabaseLocked, StorageError, SealingError) as error:
        print(f"tierank: {error}", file=sys.stderr)
        return 1
    except TierankError as error:  # what the servicer refuses, said as a client hears it
        status = status_of(error, "admin tool")
        print(f"tierank: {code_pb2.Code.Name(status.code)}: {status.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
