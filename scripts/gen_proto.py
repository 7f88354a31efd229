"""Regenerate the Python protobuf/gRPC stubs in gen/ from proto/.

python scripts/gen_proto.py          # write gen/tierank/v1/*
python scripts/gen_proto.py --check  # exit 1 if gen/ differs from what proto/ produces
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GEN_ROOT = ROOT / "gen"
PACKAGE_DIR = Path("tierank") / "v1"


def generate(out_root: Path) -> None:
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
    )
    well_known = Path(protoc.__file__).parent / "_proto"
    # Typed stubs for the service stubs and servicers (grpcio-tools writes them untyped), from
    # mypy-protobuf's plugin, installed beside this Python by the dev extras.
    grpc_stubs_plugin = Path(sys.executable).parent / "protoc-gen-mypy_grpc"
    if not grpc_stubs_plugin.is_file():
        raise SystemExit(f"{grpc_stubs_plugin} not found: pip install -e '.[dev]' (mypy-protobuf)")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--plugin=protoc-gen-mypy_grpc={grpc_stubs_plugin}",
        "--mypy_grpc_opt=quiet",
        f"--mypy_grpc_out={out_root}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (out_root / PACKAGE_DIR / "__init__.py").write_text(
        '"""Generated from proto/tierank/v1 by scripts/gen_proto.py. Do not edit."""\n'
    )


def stale_files(expected_root: Path) -> list[str]:
    expected = expected_root / PACKAGE_DIR
    actual = GEN_ROOT / PACKAGE_DIR
    names = {p.name for p in expected.iterdir()} | (
        {p.name for p in actual.iterdir() if p.suffix in {".py", ".pyi"}}
        if actual.exists()
        else set()
    )
    return sorted(
        n
        for n in names
        if not (actual / n).exists()
        or not (expected / n).exists()
        or not filecmp.cmp(expected / n, actual / n, shallow=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only report whether gen/ is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = stale_files(Path(tmp))
        if args.check:
            if stale:
                print(
                    "stale generated files (run: python scripts/gen_proto.py):", *stale, sep="\n  "
                )
                return 1
            print("generated stubs are up to date")
            return 0
        target = GEN_ROOT / PACKAGE_DIR
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(tmp) / PACKAGE_DIR, target)
    print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
