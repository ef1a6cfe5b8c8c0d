"""Progress of a Discord import: the snapshots the reader reports, and a rich bar for them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...transfer.progress import Progress, RichBar

__all__ = ["ImportProgress", "as_snapshots", "progress_bar"]


@dataclass(frozen=True, slots=True)
class ImportProgress:
    """How far the import is: bytes of the file read, and message objects seen so far."""

    bytes_read: int
    bytes_total: int
    messages_seen: int


def progress_bar(
    description: str = "importing", *, console: Any = None
) -> contextlib.AbstractContextManager[Callable[[ImportProgress], None]]:
    """A rich progress bar (bytes, messages, time) as a ``progress`` callback::

        with progress_bar("general.json") as progress:
            report = await import_export_file(memory, path, progress=progress)

    ``console`` is a ``rich.console.Console`` (default: standard error). The bar is the
    command line's :class:`~shortterm.transfer.progress.RichBar`, drawn even off a terminal.
    """
    return _counting_messages(RichBar(console, only_on_terminal=False), description)


@contextlib.contextmanager
def _counting_messages(
    bar: RichBar, description: str
) -> Iterator[Callable[[ImportProgress], None]]:
    advance = as_snapshots(bar, description)

    def update(step: ImportProgress) -> None:
        advance(step)
        bar.note(f"{step.messages_seen} messages")

    with bar.shown():
        yield update


def as_snapshots(progress: Progress, description: str) -> Callable[[ImportProgress], None]:
    """A :class:`Progress` fed from snapshots: the reader knows bytes read so far, a
    ``Progress`` wants increments."""
    done = -1

    def update(step: ImportProgress) -> None:
        nonlocal done
        if done < 0:
            progress.start(description, step.bytes_total or None, unit="bytes")
            done = 0
        progress.advance(step.bytes_read - done)
        done = step.bytes_read

    return update
