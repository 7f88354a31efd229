"""The rich console every command writes through."""

from __future__ import annotations

import rich.console


class Console(rich.console.Console):
    """rich's console, except when the reader goes away: rich then exits with status 1, which
    a shell cannot tell from a failure. Raising BrokenPipeError instead lets the command end as
    any Unix tool does when its reader is gone (status 141, nothing on stderr)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError
