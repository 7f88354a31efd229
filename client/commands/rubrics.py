"""`tierank rubrics`: the rubric presets the server knows, named as `--rubric preset:NAME`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from google.protobuf.json_format import MessageToDict
from rich import box
from rich.table import Table

from tierank.client.commands._admin import plain, print_json
from tierank.client.commands._eval_shared import add_connection_options, call
from tierank.client.commands._shared import EXIT_OK, UsageError, table_console
from tierank.v1 import eval_pb2

# How a rubric field names a preset (`--rubric preset:NAME`).
PRESET_PREFIX = "preset:"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rubrics",
        help="list the rubric presets (--rubric preset:NAME)",
        description="List the server's rubric presets: what each one judges, its version and"
        " kind (listwise: ranking jobs and qualify; pointwise: graders). Any rubric option or"
        " field takes preset:NAME (the current version) or preset:NAME@VERSION (that version,"
        " to reproduce an earlier evaluation). With NAME, print that preset's text alone, e.g."
        " to start a rubric of your own from it (--rubric @FILE).",
    )
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="print this preset's text: NAME, NAME@VERSION or preset:NAME[@VERSION]",
    )
    parser.add_argument("--json", action="store_true", help="print the presets as JSON")
    add_connection_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    presets: Sequence[eval_pb2.RubricPreset]
    presets = call(args, lambda stub: stub.ListRubrics)(eval_pb2.ListRubricsRequest()).presets
    if args.name is not None:
        presets = [_chosen(presets, args.name)]
    if args.json:
        print_json([MessageToDict(p, preserving_proto_field_name=True) for p in presets])
    elif args.name is not None:
        print(presets[0].text)
    else:
        table_console().print(_table(presets))
    return EXIT_OK


def _chosen(presets: Sequence[eval_pb2.RubricPreset], reference: str) -> eval_pb2.RubricPreset:
    """The preset named as `--rubric` names it (preset:NAME[@VERSION]), or just NAME[@VERSION]."""
    name, _, version = reference.removeprefix(PRESET_PREFIX).partition("@")
    preset = next((p for p in presets if p.name == name), None)
    if preset is None:
        known = ", ".join(p.name for p in presets)
        raise UsageError(f"no preset named {name!r}; the server has: {known}")
    if version and version != str(preset.version):
        raise UsageError(
            f"{name} is at version {preset.version}; earlier versions still judge as"
            f" --rubric {PRESET_PREFIX}{name}@VERSION, but only the current text is listed"
        )
    return preset


def _table(presets: Sequence[eval_pb2.RubricPreset]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("--rubric", no_wrap=True)
    table.add_column("version", justify="right")
    table.add_column("kind")
    table.add_column("what it judges")
    for preset in presets:
        table.add_row(
            *plain(
                f"{PRESET_PREFIX}{preset.name}",
                str(preset.version),
                preset.kind,
                preset.description,
            )
        )
    return table
