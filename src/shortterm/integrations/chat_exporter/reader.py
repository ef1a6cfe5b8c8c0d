"""The streaming JSON reader under the Discord import: a file decoded chunk by chunk.

Memory stays near the size of the largest single value, whatever the size of the file, and
every position is kept absolute so an error names the line and column it is at.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, BinaryIO

from ...model.errors import InvalidInput, ShortTermError

__all__ = ["ExportFormatError", "JsonStream"]

_CHUNK_BYTES = 1 << 16
_LOOKAHEAD = 16  # more than the longest JSON token the decoder could stop inside ("-Infinity")
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class ExportFormatError(InvalidInput):
    """The file is not a usable DiscordChatExporter JSON export; nothing was written.

    ``path`` is the JSON path at fault (``messages[12].author.id``, or ``""`` for the file as a
    whole); ``line`` and ``column`` (1-based) locate the syntax error, or the start of the
    object holding the bad field.
    """

    def __init__(
        self,
        file: str,
        path: str,
        problem: str,
        *,
        line: int | None = None,
        column: int | None = None,
        value: object = None,
    ) -> None:
        where = file if line is None else f"{file}:{line}:{column}"
        subject = f"{path}: " if path else ""
        ShortTermError.__init__(self, f"{where}: {subject}{problem}")
        # InvalidInput's fields, then where in which file.
        self.field, self.value, self.allowed = path, value, problem
        self.file, self.path, self.line, self.column = file, path, line, column


class JsonStream:
    """A UTF-8 file decoded chunk by chunk, with absolute positions kept for error messages.

    ``buf[pos:]`` is what is still to be parsed; everything before ``base`` (absolute
    character offset of ``buf[0]``) was consumed and dropped.
    """

    def __init__(self, fh: BinaryIO, name: str, total: int) -> None:
        self.fh = fh
        self.name = name
        self.total = total
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.base = 0
        self.base_line = 1  # the line of buf[0]
        self.base_line_start = 0  # absolute offset where that line starts
        self.bytes_read = 0
        self.eof = False
        self.started = False

    def more(self) -> bool:
        """Read at least one more chunk (doubling with the size of a value in progress)."""
        if self.eof:
            return False
        want = max(_CHUNK_BYTES, len(self.buf) - self.pos)
        data = self.fh.read(want)
        self.bytes_read += len(data)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            offset = self.bytes_read - len(data) + exc.start
            raise ExportFormatError(
                self.name, "", f"not UTF-8 text (byte {offset} cannot be decoded)"
            ) from None
        if not self.started:
            self.started = True
            text = text.removeprefix("\ufeff")
        if not data:
            self.eof = True
        self.buf += text
        return True

    def compact(self) -> None:
        if self.pos < _CHUNK_BYTES:
            return
        dropped = self.buf[: self.pos]
        newlines = dropped.count("\n")
        if newlines:
            self.base_line += newlines
            self.base_line_start = self.base + dropped.rindex("\n") + 1
        self.base += self.pos
        self.buf = self.buf[self.pos :]
        self.pos = 0

    def location(self, index: int) -> tuple[int, int]:
        """Line and column (1-based) of ``buf[index]``."""
        newlines = self.buf.count("\n", 0, index)
        line = self.base_line + newlines
        if newlines:
            start = self.base + self.buf.rindex("\n", 0, index) + 1
        else:
            start = self.base_line_start
        return line, self.base + index - start + 1

    def error(self, index: int, path: str, problem: str) -> ExportFormatError:
        line, column = self.location(index)
        return ExportFormatError(self.name, path, problem, line=line, column=column)

    def skip_space(self) -> None:
        while True:
            end = _WHITESPACE.match(self.buf, self.pos)
            assert end is not None  # the pattern matches the empty string
            self.pos = end.end()
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self, path: str) -> str:
        self.skip_space()
        if self.pos >= len(self.buf):
            raise self.error(self.pos, path, "the file ends too early (truncated?)")
        return self.buf[self.pos]

    def expect(self, char: str, path: str, what: str) -> None:
        found = self.peek(path)
        if found != char:
            raise self.error(self.pos, path, f"expected {what}, found {found!r}")
        self.pos += 1

    def value(self, path: str) -> tuple[Any, int]:
        """Decode the next JSON value; returns it and the index where it started."""
        self.peek(path)
        decoder = _DECODER
        while True:
            start = self.pos
            try:
                value, end = decoder.raw_decode(self.buf, start)
            except json.JSONDecodeError as exc:
                # The value may just go on in the next chunk: the decoder then stops within a
                # few characters of the end (a cut literal, escape or delimiter) or at the
                # start of a string it could not close. Anything else is a real error, and
                # reading on to the end of a big file would only cost memory.
                cut = exc.pos >= len(self.buf) - _LOOKAHEAD or exc.msg.startswith("Unterminated")
                if cut and self.more():
                    continue
                problem = "the file ends too early (truncated?)"
                if exc.pos < len(self.buf):
                    problem = f"not valid JSON ({exc.msg})"
                raise self.error(exc.pos, path, problem) from None
            # A number could go on in the next chunk: only a value followed by more text
            # (or by the end of the file) is known to be whole.
            if end >= len(self.buf) and self.more():
                continue
            self.pos = end
            return value, start


_DECODER = json.JSONDecoder()
