"""`tierank tenants set | list | show | provider-key`: tenants, their limits and their own
provider keys (an admin's job for its own tenant; creating tenants is the operator's)."""

from __future__ import annotations

import argparse
import getpass
import math
import os
import sys

from google.protobuf.descriptor import FieldDescriptor
from rich import box
from rich.table import Table

from tierank.client.commands._admin import (
    add_admin_options,
    admin_call,
    limit_flag,
    limit_text,
    plain,
    print_json,
    quota_fields,
    quota_json,
    quota_summary,
    tenant_id,
    timestamp_json,
    timestamp_text,
    yes_no,
)
from tierank.client.commands._shared import EXIT_OK, UsageError, table_console
from tierank.v1 import admin_pb2

LIMIT_HELP = {
    "max_concurrent_jobs": "jobs not yet finished at once",
    "max_candidates": "candidates in one job",
    "max_watchers": "WatchJob and Rank streams open at once",
    "jobs_per_minute": "jobs created in any 60 seconds",
    "daily_judge_calls": "judge calls per UTC day",
    "daily_input_tokens": "judge input tokens per UTC day",
    "daily_cost_usd": "judge cost in US dollars per UTC day",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tenants",
        help="set and show tenants' limits and provider keys (admin)",
        description="Tenants: who owns jobs and keys, with limits (quotas) and, optionally,"
        " provider keys of their own.",
    )
    actions = parser.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="set, list, show or provider-key"
    )

    setter = actions.add_parser(
        "set",
        help="create a tenant (operator) or change its limits",
        description="Create a tenant (an operator's key, or --db) or change its limits; limits"
        " not named stay as they are. Over a limit, calls are refused with RESOURCE_EXHAUSTED.",
    )
    setter.add_argument("tenant", metavar="NAME", help="the tenant's id: letters, digits, '-', '_'")
    for field in quota_fields():
        setter.add_argument(
            f"--{limit_flag(field)}",
            dest=field.name,
            metavar="X" if field.type == FieldDescriptor.TYPE_DOUBLE else "N",
            type=_non_negative_float if field.type == FieldDescriptor.TYPE_DOUBLE else _count,
            help=LIMIT_HELP[field.name],
        )
    setter.add_argument(
        "--clear",
        action="extend",
        nargs="+",
        default=[],
        type=_limit_name,
        metavar="LIMIT",
        help="remove these limits, e.g. --clear daily-cost-usd max-watchers",
    )
    setter.add_argument(
        "--allow-server-provider-keys",
        choices=("yes", "no"),
        help="whether jobs may spend on the server's provider keys for providers the tenant"
        " has no key of its own for (yes for a new tenant)",
    )
    add_admin_options(setter)
    setter.set_defaults(handler=run_set)

    listing = actions.add_parser(
        "list",
        help="list tenants",
        description="List tenants: every one for an operator, its own for an admin.",
    )
    add_admin_options(listing)
    listing.set_defaults(handler=run_list)

    show = actions.add_parser("show", help="show one tenant", description="Show one tenant.")
    show.add_argument("tenant", metavar="NAME", help="the tenant's id")
    add_admin_options(show)
    show.set_defaults(handler=run_show)

    provider_key = actions.add_parser(
        "provider-key",
        help="set or remove a tenant's own key for a provider",
        description="Set a tenant's own credentials for a provider: its jobs then spend on"
        " its account. The key is read from stdin (or --from-env VAR), never from the command"
        " line, so that it stays out of shell history and the process list; the server stores"
        " it encrypted and never shows it again.",
    )
    provider_key.add_argument("tenant", metavar="NAME", help="the tenant's id")
    provider_key.add_argument(
        "provider", metavar="PROVIDER", help="openai, anthropic, gemini or openai-compatible"
    )
    source = provider_key.add_mutually_exclusive_group()
    source.add_argument("--from-env", metavar="VAR", help="read the key from this variable")
    source.add_argument("--remove", action="store_true", help="remove the tenant's key")
    add_admin_options(provider_key)
    provider_key.set_defaults(handler=run_provider_key)


def run_set(args: argparse.Namespace) -> int:
    request = admin_pb2.SetTenantRequest(tenant=args.tenant, clear_limits=args.clear)
    for field in quota_fields():
        value = getattr(args, field.name)
        if value is None:
            continue
        if field.name in args.clear:
            raise UsageError(f"--{limit_flag(field)} is both set and cleared")
        setattr(request.quota, field.name, value)
    if args.allow_server_provider_keys is not None:
        request.allow_server_provider_keys = args.allow_server_provider_keys == "yes"
    _print_tenant(args, admin_call(args, "SetTenant", request, admin_pb2.Tenant))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    tenants = admin_call(
        args, "ListTenants", admin_pb2.ListTenantsRequest(), admin_pb2.ListTenantsResponse
    ).tenants
    if args.format == "json":
        print_json({"tenants": [tenant_json(tenant) for tenant in tenants]})
        return EXIT_OK
    if not tenants:
        print("no tenants")
        return EXIT_OK
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("tenant", "limits", "own provider keys", "server keys", "created (UTC)"):
        table.add_column(column, no_wrap=True)
    for tenant in tenants:
        table.add_row(
            *plain(
                tenant_id(tenant.name),
                quota_summary(tenant.quota),
                ", ".join(tenant.provider_keys) or "none",
                "allowed" if tenant.allow_server_provider_keys else "not allowed",
                timestamp_text(tenant, "create_time"),
            )
        )
    table_console().print(table)
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    tenant = admin_call(
        args, "GetTenant", admin_pb2.GetTenantRequest(tenant=args.tenant), admin_pb2.Tenant
    )
    _print_tenant(args, tenant)
    return EXIT_OK


def run_provider_key(args: argparse.Namespace) -> int:
    api_key = "" if args.remove else _provider_key(args)
    request = admin_pb2.SetProviderKeyRequest(
        tenant=args.tenant, provider=args.provider, api_key=api_key
    )
    tenant = admin_call(args, "SetProviderKey", request, admin_pb2.Tenant)
    if args.format == "json":
        print_json(tenant_json(tenant))
    else:
        done = "removed" if args.remove else "set"
        print(
            f"{tenant.name}: {args.provider} key {done}; own provider keys:"
            f" {', '.join(tenant.provider_keys) or 'none'}"
        )
    return EXIT_OK


def tenant_json(tenant: admin_pb2.Tenant) -> dict[str, object]:
    return {
        "name": tenant.name,
        "quota": quota_json(tenant.quota),
        "provider_keys": list(tenant.provider_keys),
        "allow_server_provider_keys": tenant.allow_server_provider_keys,
        "create_time": timestamp_json(tenant, "create_time"),
        "update_time": timestamp_json(tenant, "update_time"),
    }


def _print_tenant(args: argparse.Namespace, tenant: admin_pb2.Tenant) -> None:
    if args.format == "json":
        print_json(tenant_json(tenant))
        return
    width = max(len(limit_flag(field)) for field in quota_fields())
    lines = [
        tenant.name,
        f"  created {timestamp_text(tenant, 'create_time')},"
        f" updated {timestamp_text(tenant, 'update_time')}",
        f"  own provider keys: {', '.join(tenant.provider_keys) or 'none'}",
        f"  server provider keys allowed: {yes_no(tenant.allow_server_provider_keys)}",
        "  limits:",
        *(
            f"    {limit_flag(field):<{width}}  {limit_text(tenant.quota, field)}"
            for field in quota_fields()
        ),
    ]
    print("\n".join(lines))


def _provider_key(args: argparse.Namespace) -> str:
    if args.from_env is not None:
        key = os.environ.get(args.from_env, "").strip()
        if not key:
            raise UsageError(f"${args.from_env} is not set or empty")
        return key
    if sys.stdin.isatty():
        key = getpass.getpass(f"{args.provider} key for tenant {args.tenant}: ").strip()
    else:
        key = sys.stdin.read().strip()
    if not key:
        raise UsageError("no provider key on stdin (--remove removes the tenant's key)")
    return key


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, not {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number, 0 or more, not {text!r}")
    return value


def _limit_name(text: str) -> str:
    name = text.replace("-", "_")
    if name not in LIMIT_HELP:
        names = ", ".join(limit_flag(field) for field in quota_fields())
        raise argparse.ArgumentTypeError(f"{text!r} is not a limit; one of {names}")
    return name
