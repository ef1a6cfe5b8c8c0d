"""The ``shortterm`` group and the one place errors become exit codes.

====  ===========================================================
0     done
1     a confirmation was declined (nothing was changed)
2     invalid input or configuration (``InvalidInput``, ``ConfigError``, a malformed import)
3     the store or cache is unavailable (``StoreUnavailable``)
4     an optional dependency is missing (``ExtraMissing``); the message says what to install
====  ===========================================================

An error is printed on stderr (``error: …``), never with a traceback; a backend or a
configuration error is one line (a driver's message that spans several is joined with ``; ``).
Before any command runs, each ``SHORTTERM_*`` variable shortterm does not read gets a warning
line, naming the known variable it is closest to (:mod:`.environment`).
"""

from __future__ import annotations

import os
from typing import Any

import click

from ..model.errors import ConfigError, ExtraMissing, InvalidInput, ShortTermError, StoreUnavailable

__all__ = [
    "EXIT_DECLINED",
    "EXIT_EXTRA_MISSING",
    "EXIT_INVALID",
    "EXIT_UNAVAILABLE",
    "Declined",
    "exit_code",
    "main",
    "one_line",
]

EXIT_DECLINED = 1
EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_EXTRA_MISSING = 4


class Declined(Exception):
    """The user answered no to a confirmation."""


def exit_code(exc: BaseException) -> int | None:
    """The exit code for an error a command raised; ``None`` for errors we do not map."""
    if isinstance(exc, Declined):
        return EXIT_DECLINED
    if isinstance(exc, StoreUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, ExtraMissing):
        return EXIT_EXTRA_MISSING
    if isinstance(exc, InvalidInput | ConfigError):
        return EXIT_INVALID
    if isinstance(exc, ShortTermError):
        return EXIT_INVALID  # no other kind exists today; refuse rather than crash
    return None


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ShortTermError, Declined) as exc:
            code = exit_code(exc)
            assert code is not None
            if isinstance(exc, Declined):
                click.echo("nothing was changed", err=True)
            elif isinstance(exc, StoreUnavailable | ConfigError):
                # A driver's words may span lines: a backend or a setting is one line.
                click.echo(f"error: {one_line(str(exc))}", err=True)
            else:
                click.echo(f"error: {exc}", err=True)  # a malformed import lists its lines
            ctx.exit(code)


def one_line(message: str) -> str:
    """``message`` on one line: its non-blank lines, stripped, joined with ``; ``."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


@click.group(cls=_Group)
@click.version_option(package_name="shortterm")
def main() -> None:
    """Working memory for LLM chat bots.

    \b
    Example: shortterm inspect --channel 222
    """
    from .environment import warn_unknown

    warn_unknown(os.environ, lambda line: click.echo(line, err=True))
