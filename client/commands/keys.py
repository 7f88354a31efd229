"""`tierank keys create | list | revoke`: API keys of tenants (an admin's job for its own tenant,
the operator's for every tenant)."""

from __future__ import annotations

import argparse
import sys

from rich import box
from rich.table import Table

from tierank.client.commands._admin import (
    add_admin_options,
    admin_call,
    key_id,
    key_name,
    plain,
    print_json,
    role_name,
    timestamp_json,
    timestamp_text,
)
from tierank.client.commands._shared import EXIT_OK, table_console
from tierank.v1 import admin_pb2

ROLES = {
    "member": admin_pb2.ROLE_MEMBER,
    "admin": admin_pb2.ROLE_ADMIN,
    "operator": admin_pb2.ROLE_OPERATOR,
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="create, list and revoke API keys (admin)",
        description="API keys: each belongs to a tenant and is a member (runs and reads its"
        " tenant's jobs), an admin (also manages its own tenant's keys, quotas and provider"
        " keys) or an operator (manages every tenant, creates tenants, makes operator keys).",
    )
    actions = parser.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="create, list or revoke"
    )

    create = actions.add_parser(
        "create",
        help="make a key; its token is shown once",
        description="Make a key for an existing tenant (`tierank tenants set NAME` creates"
        " one). Its token goes to stdout, alone on its line, and is never shown again: e.g."
        " `export TIERANK_API_KEY=$(tierank keys create --tenant ops --role operator --db"
        " FILE)`.",
    )
    create.add_argument(
        "--tenant", required=True, help="the tenant the key belongs to (it must exist)"
    )
    create.add_argument(
        "--role",
        choices=ROLES,
        default="member",
        help="what the key may do (default member; an operator key needs an operator or --db)",
    )
    create.add_argument("--name", default="", metavar="LABEL", help='a label ("ci", "alice")')
    create.add_argument(
        "--certificate-subject",
        default="",
        metavar="SUBJECT",
        help='a client certificate with exactly this subject (RFC 4514, e.g. "CN=team-a")'
        " authenticates as this key over mutual TLS",
    )
    add_admin_options(create)
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list keys", description="List API keys.")
    listing.add_argument(
        "--tenant",
        default="",
        help="only this tenant's keys (default: every tenant's for an operator, the key's own"
        " tenant's for an admin)",
    )
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    add_admin_options(listing)
    listing.set_defaults(handler=run_list)

    revoke = actions.add_parser(
        "revoke",
        help="revoke a key",
        description="Revoke a key; its next call is refused. Revoking it again changes nothing.",
    )
    revoke.add_argument("key", metavar="KEY_ID", help='"keys/ID" or just ID')
    add_admin_options(revoke)
    revoke.set_defaults(handler=run_revoke)


def run_create(args: argparse.Namespace) -> int:
    request = admin_pb2.CreateApiKeyRequest(
        tenant=args.tenant,
        role=ROLES[args.role],
        display_name=args.name,
        certificate_subject=args.certificate_subject,
    )
    response = admin_call(args, "CreateApiKey", request, admin_pb2.CreateApiKeyResponse)
    key = response.key
    # On stderr, so that stdout is the token alone and `$(tierank keys create ...)` is the key.
    print(
        f"created {key.name} ({role_name(key.role)} of tenant {key.tenant}); its token is"
        " shown only now and never again: store it in a secret manager",
        file=sys.stderr,
    )
    if args.format == "json":
        print_json({"key": key_json(key), "secret": response.secret})
    else:
        print(response.secret)
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    request = admin_pb2.ListApiKeysRequest(tenant=args.tenant, include_revoked=args.all)
    keys = admin_call(args, "ListApiKeys", request, admin_pb2.ListApiKeysResponse).keys
    if args.format == "json":
        print_json({"keys": [key_json(key) for key in keys]})
        return EXIT_OK
    if not keys:
        print("no keys" + (f" for tenant {args.tenant}" if args.tenant else ""))
        return EXIT_OK
    table = Table(box=box.SIMPLE_HEAD)
    columns = ["key id", "tenant", "role", "label", "created (UTC)", "revoked"]
    with_subjects = any(key.certificate_subject for key in keys)
    if with_subjects:
        columns.append("certificate subject")
    for column in columns:
        # Only what people wrote may wrap, so that ids and times stay whole on narrow screens.
        table.add_column(column, no_wrap=column not in ("label", "certificate subject"))
    for key in keys:
        row = [
            key_id(key.name),
            key.tenant,
            role_name(key.role),
            key.display_name,
            timestamp_text(key, "create_time"),
            timestamp_text(key, "revoke_time"),
        ]
        table.add_row(*plain(*row, *([key.certificate_subject] if with_subjects else [])))
    table_console().print(table)
    return EXIT_OK


def run_revoke(args: argparse.Namespace) -> int:
    key = admin_call(
        args,
        "RevokeApiKey",
        admin_pb2.RevokeApiKeyRequest(name=key_name(args.key)),
        admin_pb2.ApiKey,
    )
    if args.format == "json":
        print_json(key_json(key))
    else:
        print(f"{key.name} of tenant {key.tenant}: revoked {timestamp_text(key, 'revoke_time')}")
    return EXIT_OK


def key_json(key: admin_pb2.ApiKey) -> dict[str, str | None]:
    return {
        "name": key.name,
        "tenant": key.tenant,
        "role": role_name(key.role),
        "display_name": key.display_name,
        "certificate_subject": key.certificate_subject,
        "create_time": timestamp_json(key, "create_time"),
        "revoke_time": timestamp_json(key, "revoke_time"),
    }
