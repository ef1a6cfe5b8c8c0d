"""Durable rows as JSON lines: the export and import format, its validation, and both drivers.

One object per line, one line per durable scope row (crude messages are never durable, so they
are not part of it)::

    {"v": 1,
     "key": {"kind": "server", "owner_id": "333", "channel_id": "222", "persona_id": "7"},
     "meta": {"server_id": "333", "server_name": "Guild", "channel_name": "general",
              "parent_channel_id": null, "private": false, "persona_lineage_id": "10001"},
     "summary": "Hike planned: Saturday, 8am.", "summary_at": 1800000000.0,
     "categories": {"mood": "calm"}, "categories_at": 1800000000.0,
     "turns_since_refresh": 3, "refresh_epoch": 1, "updated_at": 1800000000.0}

Times are epoch seconds. ``key.persona_id`` and the ``meta`` fields may be left out (``null``
and ``false``), and so may empty values; ``v``, ``key`` and ``updated_at`` are required.

**Import is all or nothing for validation**: every line is checked before anything is written,
and a file with a bad line is refused whole, naming each line and field at fault. The valid
file is then written in batches, each one transaction; a row replaces the stored row with the
same key, so if the store fails midway, running the same import again completes it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from ..model import ScopeKey, ScopeMeta, ScopeRow, check_id
from ..model.errors import InvalidInput, StoreUnavailable
from ..model.text import clean_text, truncate
from .progress import Progress
from .report import ImportReport

if TYPE_CHECKING:
    from ..memory.facade import Memory

__all__ = [
    "FORMAT_VERSION",
    "ImportReport",
    "LineError",
    "LineProblem",
    "MalformedFile",
    "Progress",
    "dump_row",
    "export_jsonl",
    "import_jsonl",
    "parse_row",
    "row_to_dict",
]

FORMAT_VERSION = 1
MAX_PROBLEMS_SHOWN = 20
MAX_LINE_BYTES = 4 << 20  # far above any row we write; a longer line is not ours


# -- writing ---------------------------------------------------------------------------------


def row_to_dict(row: ScopeRow) -> dict[str, Any]:
    key, meta = row.key, row.meta
    return {
        "v": FORMAT_VERSION,
        "key": {
            "kind": key.kind,
            "owner_id": key.owner_id,
            "channel_id": key.channel_id,
            "persona_id": key.persona_id,
        },
        "meta": {
            "server_id": meta.server_id,
            "server_name": meta.server_name,
            "channel_name": meta.channel_name,
            "parent_channel_id": meta.parent_channel_id,
            "private": meta.private,
            "persona_lineage_id": meta.persona_lineage_id,
        },
        "summary": row.summary,
        "summary_at": row.summary_at,
        "categories": dict(sorted(row.categories.items())),
        "categories_at": row.categories_at,
        "turns_since_refresh": row.turns_since_refresh,
        "refresh_epoch": row.refresh_epoch,
        "updated_at": row.updated_at,
    }


def dump_row(row: ScopeRow) -> str:
    """One line of the format, without its newline."""
    return json.dumps(row_to_dict(row), ensure_ascii=False, separators=(",", ":"))


# -- reading ---------------------------------------------------------------------------------


def _id(value: str) -> str:
    try:
        return check_id("id", value)
    except InvalidInput as exc:
        raise ValueError(exc.allowed) from None


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("blank text; leave the value out (or null) instead")
    return clean_text(value)


Id = Annotated[str, AfterValidator(_id)]
Name = Annotated[str, Field(max_length=1000), AfterValidator(clean_text)]
Text = Annotated[str, AfterValidator(_text)]
Epoch = Annotated[float, Field(ge=0, lt=1e11)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Key(_Strict):
    kind: Literal["user", "server"]
    owner_id: Id
    channel_id: Id
    persona_id: Id | None = None


class _Meta(_Strict):
    server_id: Id | None = None
    server_name: Name | None = None
    channel_name: Name | None = None
    parent_channel_id: Id | None = None
    private: bool = False
    persona_lineage_id: Id | None = None


class _Line(_Strict):
    v: Literal[1]
    key: _Key
    meta: _Meta = Field(default_factory=_Meta)
    summary: Text | None = None
    summary_at: Epoch | None = None
    categories: dict[Id, Text] = Field(default_factory=dict)
    categories_at: Epoch | None = None
    turns_since_refresh: Count = 0
    refresh_epoch: Count = 0
    updated_at: Epoch

    @model_validator(mode="after")
    def _consistent(self) -> _Line:
        if (self.summary is None) != (self.summary_at is None):
            raise ValueError("summary and summary_at are given together or not at all")
        if bool(self.categories) != (self.categories_at is not None):
            raise ValueError("categories_at is given exactly when categories is not empty")
        server = self.meta.server_id
        if self.key.kind == "server" and server is not None and server != self.key.owner_id:
            raise ValueError("meta.server_id of a server scope is its key.owner_id")
        return self


@dataclass(frozen=True, slots=True)
class LineProblem:
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, {self.field}: {self.message}"


class MalformedFile(InvalidInput):
    """A file that cannot be imported; ``problems`` lists the lines and fields at fault."""

    def __init__(self, source: str, problems: Sequence[LineProblem], count: int) -> None:
        shown = "\n".join(f"  {p}" for p in problems)
        more = count - len(problems)
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            "file",
            source,
            f"{count} problem(s); nothing was imported:\n{shown}{tail}",
        )
        self.problems = list(problems)
        self.count = count


class LineError(ValueError):
    """One line that is not a valid row; ``problems`` pairs each field at fault with why."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems


def _field(loc: Sequence[int | str]) -> str:
    """A field path as a reader would write it: ``key.owner_id``, ``categories['mood']``."""
    if loc and loc[0] == "categories" and len(loc) > 1:
        return f"categories[{loc[1]!r}]" + (" (the slug)" if "[key]" in loc else "")
    return ".".join(map(str, loc)) or "(row)"


def _message(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def parse_row(data: str | bytes, *, max_chars: int) -> tuple[ScopeRow, bool]:
    """One line of the format as a row, and whether a value was cut to ``max_chars`` (as every
    write path caps text). Raises :class:`LineError` naming the fields at fault."""
    try:
        line = _Line.model_validate_json(data)
    except ValidationError as exc:
        problems = [(_field(e["loc"]), _message(e["msg"])) for e in exc.errors()]
        raise LineError(problems) from None
    capped = False

    def cap(text: str) -> str:
        nonlocal capped
        if len(text) <= max_chars:
            return text
        capped = True
        return truncate(text, max_chars).rstrip()

    k, m = line.key, line.meta
    key = ScopeKey(k.kind, k.owner_id, k.channel_id, k.persona_id)
    server_id = m.server_id if m.server_id is not None or k.kind == "user" else k.owner_id
    meta = ScopeMeta(
        server_id=server_id,
        server_name=m.server_name,
        channel_name=m.channel_name,
        parent_channel_id=m.parent_channel_id,
        private=m.private,
        persona_lineage_id=m.persona_lineage_id,
    )
    row = ScopeRow(
        key=key,
        meta=meta,
        summary=None if line.summary is None else cap(line.summary),
        summary_at=line.summary_at,
        categories={slug: cap(text) for slug, text in line.categories.items()},
        categories_at=line.categories_at,
        turns_since_refresh=line.turns_since_refresh,
        refresh_epoch=line.refresh_epoch,
        updated_at=line.updated_at,
    )
    return row, capped


# -- the drivers -----------------------------------------------------------------------------


async def export_jsonl(
    memory: Memory,
    destination: str | Path | IO[str],
    *,
    progress: Progress | None = None,
    batch_rows: int = 1000,
    **filters: Any,
) -> int:
    """Write durable rows as JSON lines; returns how many.

    With no ``filters``, every row is streamed (memory stays bounded by ``batch_rows``);
    otherwise the rows of :meth:`Memory.find_rows` with those filters. A path is written to a
    temporary file renamed into place at the end, so a failed export never leaves a partial
    file that looks complete.
    """
    batches: AsyncIterator[Sequence[ScopeRow]]
    if filters:
        found = await memory.find_rows(**filters)
        batches = _once(found)
        total: int | None = len(found)
    else:
        batches = memory.export_rows(batch_rows=batch_rows)
        total = None
    if progress is not None:
        progress.start("exporting rows", total)
    with _text_out(destination) as out:
        count = 0
        async for batch in batches:
            out.write("".join(dump_row(row) + "\n" for row in batch))
            count += len(batch)
            if progress is not None:
                progress.advance(len(batch))
    return count


async def _once(rows: Sequence[ScopeRow]) -> AsyncIterator[Sequence[ScopeRow]]:
    yield rows


@contextmanager
def _text_out(destination: str | Path | IO[str]) -> Iterator[IO[str]]:
    if not isinstance(destination, str | Path):
        yield destination
        destination.flush()
        return
    target = Path(destination)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            yield out
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


Opener = Callable[[], AbstractContextManager[IO[bytes]]]


async def import_jsonl(
    memory: Memory,
    source: str | Path | IO[bytes],
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    batch_rows: int = 500,
) -> ImportReport:
    """Validate a JSON-lines file whole, then write it in batches (see the module docstring).

    Raises :class:`MalformedFile` (nothing written) when a line is not a valid row or a key
    appears twice. A stream that cannot be read twice (stdin) is copied to a temporary file.
    """
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidInput("batch_rows", batch_rows, "a positive integer")
    max_chars = memory.config.max_summary_chars
    with _two_pass(source) as (name, opener, size):
        if progress is not None:
            progress.start("checking lines", size, "bytes")
        rows, capped = _validate(name, opener, max_chars, progress)
        if dry_run or rows == 0:
            return ImportReport(format="jsonl", rows=rows, capped=capped, dry_run=dry_run)
        if progress is not None:
            progress.start("importing rows", rows)
        written = 0
        batch: list[ScopeRow] = []
        try:
            for _, data in _lines(opener):
                batch.append(parse_row(data, max_chars=max_chars)[0])
                if len(batch) >= batch_rows:
                    written += await _write(memory, batch, progress)
                    batch = []
            if batch:
                written += await _write(memory, batch, progress)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"{exc} (the import stopped after {written} of {rows} rows; rows replace "
                "stored rows by key, so running the same import again completes it)"
            ) from exc
    return ImportReport(
        format="jsonl", rows=rows, written=written, skipped_private=rows - written, capped=capped
    )


async def _write(memory: Memory, batch: list[ScopeRow], progress: Progress | None) -> int:
    written = len(await memory.import_rows(batch))
    if progress is not None:
        progress.advance(len(batch))
    return written


def _validate(
    name: str, opener: Opener, max_chars: int, progress: Progress | None
) -> tuple[int, int]:
    problems: list[LineProblem] = []
    count = 0
    rows = capped = 0
    first_seen: dict[tuple[str, str, str, str | None], int] = {}

    def problem(line: int, field: str, message: str) -> None:
        nonlocal count
        count += 1
        if len(problems) < MAX_PROBLEMS_SHOWN:
            problems.append(LineProblem(line, field, message))

    for number, data in _lines(opener, progress):
        if len(data) > MAX_LINE_BYTES:
            problem(number, "(line)", f"longer than {MAX_LINE_BYTES} bytes")
            continue
        try:
            row, was_capped = parse_row(data, max_chars=max_chars)
        except LineError as exc:
            for field, message in exc.problems:
                problem(number, field, message)
            continue
        first = first_seen.setdefault(row.key.astuple, number)
        if first != number:
            problem(number, "key", f"the same key as line {first}")
            continue
        rows += 1
        capped += was_capped
    if count:
        raise MalformedFile(name, problems, count)
    return rows, capped


def _lines(opener: Opener, progress: Progress | None = None) -> Iterator[tuple[int, bytes]]:
    """The numbered non-blank lines of the source, read from its start."""
    with opener() as stream:
        for number, data in enumerate(stream, 1):
            if progress is not None:
                progress.advance(len(data))
            if data.strip():
                yield number, data


@contextmanager
def _two_pass(source: str | Path | IO[bytes]) -> Iterator[tuple[str, Opener, int | None]]:
    """The source's name, a way to read it from the start again, and its size in bytes."""
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise InvalidInput("file", str(path), f"a readable file ({exc.strerror})") from None
        yield str(path), lambda: path.open("rb"), size
        return
    name = str(getattr(source, "name", "<stream>"))
    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(source, spool)
        size = spool.tell()

        @contextmanager
        def rewound() -> Iterator[IO[bytes]]:
            spool.seek(0)
            yield spool

        yield name, rewound, size
