"""Type-check the `tierank` package with mypy, as configured in pyproject.toml.

The repository root is the package: pyproject's package-dir maps `tierank` to `.` and
`tierank.v1` to gen/tierank/v1, which an editable install resolves with an import hook that
mypy cannot follow. So this lays the package out as Python imports it, as symbolic links under
.mypy_cache/ (the same place every run, so that mypy's cache stays valid), runs mypy on it, and
prints mypy's paths as the repository's own.

python scripts/typecheck.py   # mypy's report and exit status
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tierank"
# pyproject's [tool.mypy] mypy_path names this folder.
LAYOUT = ROOT / ".mypy_cache" / "package"


def top_level_parts() -> dict[str, Path]:
    """Each top-level module and subpackage of `tierank` -> the file or folder it is made of,
    from pyproject's setuptools table (data-only parts, without __init__.py, left out)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = setuptools["package-dir"]
    root = ROOT / package_dir[PACKAGE]
    parts = {module.name: module for module in root.glob("*.py")}
    for name in setuptools["packages"]:
        parent, _, part = name.rpartition(".")
        folder = ROOT / package_dir.get(name, part)
        if parent == PACKAGE and (folder / "__init__.py").is_file():
            parts[part] = folder
    return parts


def lay_out(parts: dict[str, Path]) -> None:
    package = LAYOUT / PACKAGE
    if package.exists():
        shutil.rmtree(package)  # removes the links, never what they point to
    package.mkdir(parents=True)
    for name, target in parts.items():
        (package / name).symlink_to(target, target_is_directory=target.is_dir())


def main() -> int:
    parts = top_level_parts()
    lay_out(parts)
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    laid_out = re.compile(
        rf"^{re.escape(str((LAYOUT / PACKAGE).relative_to(ROOT)))}/([^/:]+)", re.MULTILINE
    )
    report = laid_out.sub(lambda m: str(parts[m[1]].relative_to(ROOT)), result.stdout)
    sys.stdout.write(report)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
