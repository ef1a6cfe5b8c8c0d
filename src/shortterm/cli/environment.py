"""The ``SHORTTERM_*`` environment variables shortterm reads, in one place, and the warning for
one it does not read: a misspelled ``SHORTTERM_STOR`` would otherwise be ignored without a word
(and the command would open the default store).

Kept here, apart from the readers (``--store``/``--cache`` in :mod:`.common`,
``Config.from_env``, ``SidecarSettings.from_env``, the distiller's key), so the check costs no
import of the web stack; ``tests/test_operator_errors.py`` fails when a reader names a
variable this list lacks.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterator, Mapping

from ..model.config import Config

__all__ = ["IGNORED_PREFIXES", "KNOWN", "unknown_variables", "warn_unknown"]

PREFIX = "SHORTTERM_"

KNOWN: frozenset[str] = frozenset(
    {
        # Every command that opens memory (--store, --cache).
        "SHORTTERM_STORE",
        "SHORTTERM_CACHE",
        # shortterm distill, shortterm serve --distill-…
        "SHORTTERM_DISTILL_API_KEY",
        # shortterm serve: SidecarSettings.from_env
        "SHORTTERM_HOST",
        "SHORTTERM_PORT",
        "SHORTTERM_TOKEN",
        "SHORTTERM_MAX_BODY_BYTES",
        "SHORTTERM_TURN_TTL_S",
        "SHORTTERM_MAX_TURNS",
    }
    # The library's settings: Config.from_env reads one variable per field.
    | {f"{PREFIX}{f.name.upper()}" for f in dataclasses.fields(Config)}
)

# The test suite's own variables (SHORTTERM_TEST_POSTGRES_URL, …): not settings of shortterm.
IGNORED_PREFIXES = ("SHORTTERM_TEST_",)


def unknown_variables(environ: Mapping[str, str]) -> Iterator[tuple[str, str | None]]:
    """Each ``SHORTTERM_*`` variable of ``environ`` that shortterm does not read, in name
    order, with the known variable it is closest to (``None`` when none is close)."""
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in KNOWN or name.startswith(IGNORED_PREFIXES):
            continue
        # Compared without the prefix they all share, which would make any two look alike.
        suffixes = sorted(known.removeprefix(PREFIX) for known in KNOWN)
        close = difflib.get_close_matches(name.removeprefix(PREFIX), suffixes, n=1)
        yield name, PREFIX + close[0] if close else None


def warn_unknown(environ: Mapping[str, str], echo: Callable[[str], None]) -> None:
    """One warning line per unknown ``SHORTTERM_*`` variable."""
    for name, close in unknown_variables(environ):
        hint = f" (did you mean {close}?)" if close else ""
        echo(f"warning: {name} is not a variable shortterm reads; it is ignored{hint}")
