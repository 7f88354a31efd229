"""Write README.md's table of server settings from their declarations (tierank.server.settings).

python scripts/settings_table.py          # rewrite the table between its markers
python scripts/settings_table.py --check  # exit 1 if README.md's table differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tierank.server.settings import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN = "<!-- settings table: written by scripts/settings_table.py from server/settings.py -->\n"
END = "<!-- end of settings table -->\n"


def with_table(text: str) -> str:
    """`text` with the table between the markers replaced by the declarations' table."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise SystemExit(f"{README}: the settings table's markers are missing")
    return f"{head}{BEGIN}{markdown_table()}{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    wanted = with_table(text)
    if args.check:
        if wanted != text:
            print(f"{README.name}'s settings table is stale: run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
