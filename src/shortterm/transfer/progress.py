"""How every import and export reports long work: one ``Progress`` protocol, one rich bar.

The drivers (:mod:`shortterm.transfer.rows`, :mod:`shortterm.integrations.chat_exporter`)
speak only the protocol, so a caller can count, log or draw as it likes; :class:`RichBar` is
the bar the command line draws, and the one behind ``chat_exporter.progress_bar``. rich is
imported when a bar is made, never by the drivers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Progress", "RichBar"]


@runtime_checkable
class Progress(Protocol):
    """Where a driver reports long work, phase by phase (checked at run time by the Discord
    import, which also takes a plain callback)."""

    def start(self, description: str, total: int | None, unit: str = "rows") -> None:
        """A new phase of ``total`` units (``"rows"`` or ``"bytes"``; ``None``: unknown)."""

    def advance(self, amount: int) -> None:
        """``amount`` more units of the current phase are done."""


class RichBar:
    """A :class:`Progress` drawn by rich: one line per phase, counting rows or bytes.

    ``console`` defaults to standard error; ``only_on_terminal`` draws nothing when that is a
    pipe or a file (the command line's choice, so logs stay clean). ``note`` is shown after
    the count (the Discord import's message count).
    """

    def __init__(self, console: Console | None = None, *, only_on_terminal: bool = True) -> None:
        from rich.console import Console
        from rich.filesize import decimal
        from rich.progress import (
            BarColumn,
            ProgressColumn,
            SpinnerColumn,
            Task,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bars
        from rich.text import Text

        class Done(ProgressColumn):
            def render(self, task: Task) -> Text:
                unit = task.fields.get("unit", "rows")
                show: Callable[[float], str] = lambda n: str(int(n))  # noqa: E731
                if unit == "bytes":
                    show, unit = (lambda n: decimal(int(n))), ""
                total = "?" if task.total is None else show(task.total)
                return Text(f"{show(task.completed)}/{total} {unit}".rstrip())

        console = console or Console(stderr=True, highlight=False)
        self._bars = Bars(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            Done(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            disable=only_on_terminal and not console.is_terminal,
        )
        self._task: Any = None

    def start(self, description: str, total: int | None, unit: str = "rows") -> None:
        if self._task is not None:
            self._bars.stop_task(self._task)
        self._task = self._bars.add_task(description, total=total, unit=unit, note="")

    def advance(self, amount: int) -> None:
        self._bars.advance(self._task, amount)

    def note(self, text: str) -> None:
        self._bars.update(self._task, note=text)

    @contextmanager
    def shown(self) -> Iterator[RichBar]:
        """The bar, drawn while the block runs."""
        with self._bars:
            yield self
