"""`tierank usage`: a tenant's judge spend today and in total, its limits and unfinished jobs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

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
)
from tierank.client.commands._shared import EXIT_OK, table_console
from tierank.v1 import admin_pb2

# The daily limits, and what of a day's spend each one counts.
_DAILY_SPEND = {
    "daily_judge_calls": "calls",
    "daily_input_tokens": "input_tokens",
    "daily_cost_usd": "cost_usd",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="a tenant's spend today and in total, per judge",
        description="A tenant's judge spend today (UTC) and in total, per judge; what calls in"
        " flight have reserved; its limits; its unfinished jobs. A member key sees its own"
        " tenant only.",
    )
    parser.add_argument(
        "--tenant", default="", help="whose usage (default: the tenant of the API key)"
    )
    add_admin_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    usage = admin_call(
        args, "GetUsage", admin_pb2.GetUsageRequest(tenant=args.tenant), admin_pb2.TenantUsage
    )
    if args.format == "json":
        print_json(usage_json(usage))
        return EXIT_OK
    print(f"tenant {usage.tenant}, today {usage.day} (UTC)")
    console = table_console()
    for title, spends in (("today", usage.today), ("total", usage.total)):
        if spends:
            console.print(_spend_table(title, spends))
        else:
            print(f"{title}: no judge calls")
    reserved = usage.reserved
    width = max(len(limit_flag(field)) for field in quota_fields())
    lines = [
        f"reserved by calls in flight: {reserved.calls} calls, {reserved.input_tokens} input"
        f" tokens, ${reserved.cost_usd:.4f}",
        f"unfinished jobs: {usage.unfinished_jobs}",
        "limits:",
        *(
            f"  {limit_flag(field):<{width}}  {limit_text(usage.quota, field)}"
            f"{_used_today(usage, field)}"
            for field in quota_fields()
        ),
    ]
    print("\n".join(lines))
    return EXIT_OK


def usage_json(usage: admin_pb2.TenantUsage) -> dict[str, object]:
    return {
        "tenant": usage.tenant,
        "day": usage.day,
        "today": [_spend_json(spend) for spend in usage.today],
        "total": [_spend_json(spend) for spend in usage.total],
        "reserved": _spend_json(usage.reserved),
        "quota": quota_json(usage.quota),
        "unfinished_jobs": usage.unfinished_jobs,
    }


def _spend_json(spend: admin_pb2.JudgeSpend) -> dict[str, object]:
    return {
        "judge": spend.judge,
        "calls": spend.calls,
        "input_tokens": spend.input_tokens,
        "output_tokens": spend.output_tokens,
        "cost_usd": spend.cost_usd,
    }


def _spend_table(title: str, spends: Sequence[admin_pb2.JudgeSpend]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("judge", no_wrap=True)
    for column in ("calls", "input tokens", "output tokens", "cost"):
        table.add_column(column, justify="right", no_wrap=True)
    for spend in spends:
        table.add_row(*plain(*_spend_cells(spend.judge, spend)))
    if len(spends) != 1:
        table.add_row(*_spend_cells("all judges", _sum(spends)), style="bold")
    return table


def _spend_cells(label: str, spend: admin_pb2.JudgeSpend) -> tuple[str, ...]:
    return (
        label,
        str(spend.calls),
        str(spend.input_tokens),
        str(spend.output_tokens),
        f"${spend.cost_usd:.4f}",
    )


def _sum(spends: Sequence[admin_pb2.JudgeSpend]) -> admin_pb2.JudgeSpend:
    return admin_pb2.JudgeSpend(
        calls=sum(s.calls for s in spends),
        input_tokens=sum(s.input_tokens for s in spends),
        output_tokens=sum(s.output_tokens for s in spends),
        cost_usd=sum(s.cost_usd for s in spends),
    )


def _used_today(usage: admin_pb2.TenantUsage, field: FieldDescriptor) -> str:
    """ " (today: 120 used, 5 reserved)" after a daily limit; empty for the others."""
    spent = _DAILY_SPEND.get(field.name)
    if spent is None:
        return ""
    used = getattr(_sum(list(usage.today)), spent)
    reserved = getattr(usage.reserved, spent)
    if spent == "cost_usd":
        return f" (today: ${used:.4f} used, ${reserved:.4f} reserved)"
    return f" (today: {used} used, {reserved} reserved)"
