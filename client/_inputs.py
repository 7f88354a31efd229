"""The one way the command line reads a user's file: runs, qrels, topics, pools, passages and
rubrics all go through here, so an editor's habits (a UTF-8 byte order mark, CRLF line ends)
mean the same thing in every file and every command, and a file that is not text says so in
one line naming the file and line.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

# `--rubric @FILE`: the rubric is the file's text.
FILE_PREFIX = "@"


class InputError(ValueError):
    """A file that cannot be read as text, or holds nothing; the message names file and line."""


def read_text(path: Path) -> str:
    """The whole file as text with "\\n" line ends, a leading byte order mark dropped."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = data.count(b"\n", 0, error.start) + 1
        raise _not_utf8(path, line_number) from None
    if not text or text.isspace():
        raise _empty(path)
    return text.replace("\r\n", "\n")


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines with their 1-based numbers, read as `read_text` reads the
    whole file but streamed: passage collections can be millions of lines."""
    any_line = False
    try:
        with open(path, "rb") as file:
            for line_number, raw in enumerate(file, start=1):
                if line_number == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    # Only "\n" ends a line: MS MARCO passages hold U+2028 inside JSON strings.
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise _not_utf8(path, line_number) from None
                if line.strip():
                    any_line = True
                    yield line_number, line
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    if not any_line:
        raise _empty(path)


def read_rubric(value: str) -> str:
    """A `--rubric` value as the server takes it: `@FILE` is the file's text, anything else
    (a definition, `preset:NAME[@VERSION]`, nothing for the server's default) as given."""
    if not value.startswith(FILE_PREFIX):
        return value
    path = Path(value.removeprefix(FILE_PREFIX))
    try:
        return read_text(path).strip()
    except InputError as error:
        raise InputError(f"--rubric: {error}") from None


def _not_utf8(path: Path, line_number: int) -> InputError:
    return InputError(f"{path}:{line_number}: not UTF-8 text")


def _empty(path: Path) -> InputError:
    return InputError(f"{path}: the file is empty")
