"""Imports run one way (../shared/DESIGN.md): within server/, each layer imports only the layers
below it, and the client imports nothing from the server; and errors become statuses in one
place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEAF = {"errors", "names", "metrics", "logs"}
# What each part of server/ may import from server/, besides itself and the leaf modules.
BELOW = {
    # Traces and judge-level series: every layer tells it what happens; it knows none of them.
    "observability": set(),
    "storage": {"observability"},
    "judges": {"observability"},
    "tenancy": {"observability", "storage", "judges"},
    # The mapping between the API's messages and the domain's types (requests to scheduler and
    # judge types, storage records to resources): below every layer that speaks the wire.
    "wire": {"observability", "storage", "judges", "tenancy"},
    "jobs": {"observability", "storage", "judges", "tenancy", "wire"},
    "labeling": {"observability", "storage", "judges", "tenancy", "wire", "jobs"},
    # Studies: each query a job, the labels and report from their tiers.
    "studies": {"observability", "storage", "judges", "tenancy", "wire", "jobs", "labeling"},
    "rpc": {
        "observability",
        "storage",
        "judges",
        "tenancy",
        "wire",
        "jobs",
        "labeling",
        "studies",
    },
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def server_part(module: str) -> str | None:
    """'jobs' for tierank.server.jobs.runner, 'errors' for tierank.server.errors."""
    parts = module.split(".")
    if parts[:2] != ["tierank", "server"] or len(parts) < 3:
        return None
    return parts[2]


def layer_of(path: Path) -> str:
    relative = path.relative_to(ROOT / "server")
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "server").rglob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_server_layers_import_only_downwards(path: Path):
    layer = layer_of(path)
    if layer not in BELOW and layer not in LEAF:
        return  # the composition root (app, settings, __main__, admin_tool) wires everything
    allowed = LEAF | {layer} | BELOW.get(layer, set())
    if layer in LEAF:
        allowed = {layer}
    wrong = {
        module
        for module in imported_modules(path)
        if (part := server_part(module)) is not None and part not in allowed
    }
    assert not wrong, f"{path.relative_to(ROOT)} ({layer}) imports {sorted(wrong)}"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "client").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_client_imports_nothing_from_the_server(path: Path):
    assert not {m for m in imported_modules(path) if server_part(m) is not None}


# What builds a google.rpc status and its details. The layers raise the server's errors
# (server/errors.py); only the API edge's mapping turns them into statuses.
STATUS_BUILDERS = ("google.rpc.status_pb2", "google.rpc.error_details_pb2", "grpc_status")
STATUS_MAPPING = ROOT / "server" / "rpc" / "statuses.py"


def test_only_the_edge_mapping_builds_statuses():
    building = {
        str(path.relative_to(ROOT)): sorted(
            module for module in imported_modules(path) if module.startswith(STATUS_BUILDERS)
        )
        for path in sorted((ROOT / "server").rglob("*.py"))
        if path != STATUS_MAPPING
    }
    assert not {path: modules for path, modules in building.items() if modules}
