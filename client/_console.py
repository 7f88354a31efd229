"""The rich console every command writes through."""

from __future__ import annotations

from typing import Any

import rich.console
from rich.measure import Measurement
from rich.table import Table

# What an empty cell shows off a terminal.
EMPTY_CELL = "-"
# Wider than any table: measuring against it gives a table's natural widths.
_UNLIMITED = 2**16


class Console(rich.console.Console):
    """rich's console, with two differences.

    Tables never cut what users copy (job names, ids, numbers): rich squeezes every column of
    a table wider than the console, so such a table is printed wider, and a terminal wraps its
    lines instead. Off a terminal (a pipe, a file), a table is plain lines for scripts: no rules,
    each row on one line however long, "-" in an empty cell; and a line of text is not wrapped.

    When the reader goes away, rich exits with status 1, which a shell cannot tell from a
    failure; raising BrokenPipeError instead lets the command end as any Unix tool does when its
    reader is gone (status 141, nothing on stderr).
    """

    def print(self, *objects: Any, **options: Any) -> None:
        tables = [item for item in objects if isinstance(item, Table)]
        if not tables:
            # Off a terminal a line stays one line, however long (rich would wrap it).
            options.setdefault("soft_wrap", not self.is_terminal)
            super().print(*objects, **options)
            return
        if not self.is_terminal:
            for table in tables:
                _plain_lines(table)
        needed = max(self._uncut_width(table) for table in tables)
        width = self.width
        self.width = max(width, needed)
        try:
            super().print(*objects, **options)
        finally:
            self.width = width

    def _uncut_width(self, table: Table) -> int:
        """On a terminal, wide enough that rich cuts no cell of a column that does not wrap
        (rich's own minimum only spares the longest word); elsewhere, every row on one line."""
        unlimited = self.options.update_width(_UNLIMITED)
        if not self.is_terminal:
            return Measurement.get(self, unlimited, table).maximum
        columns = [(c, table._measure_column(self, unlimited, c)) for c in table.columns]
        fixed = sum(m.maximum if column.no_wrap else m.minimum for column, m in columns)
        return fixed + table._extra_width

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _plain_lines(table: Table) -> None:
    """A table as lines a script splits on whitespace: no rules, and "-" in an empty cell so
    that every row has every column."""
    table.box = None
    for column in table.columns:
        column._cells = [cell if cell != "" else EMPTY_CELL for cell in column._cells]
