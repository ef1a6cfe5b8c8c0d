"""The ``shortterm`` command line.

Each command is one library call, plus what it takes to show the result; rich, pydantic and
the MCP SDK are imported inside the commands that use them, so ``shortterm --help`` stays
fast. Errors become exit codes in one place, :meth:`shortterm.cli.app._Group.invoke` (the
table is in :mod:`shortterm.cli.app`).

Commands that open memory take ``--store`` and ``--cache`` (defaults from ``SHORTTERM_STORE``
and ``SHORTTERM_CACHE``, then ``sqlite:///shortterm.db`` and ``memory://``) and read the rest
of their configuration with ``Config.from_env``. Every command is documented, with examples,
in ``docs/cli.md``.

One module per job: :mod:`.app` (the group, exit codes), :mod:`.common` (what commands
share), :mod:`.looking` (inspect, show), :mod:`.forgetting` (clear, privacy),
:mod:`.maintenance` (janitor, migrate), :mod:`.transfer` (export, import), :mod:`.bench`
and :mod:`.running` (demo, serve, mcp). Importing a module registers its commands on
:func:`main`.
"""

from __future__ import annotations

from . import (  # noqa: F401 - registers
    bench,
    distilling,
    fakemodel,
    forgetting,
    looking,
    maintenance,
    running,
    transfer,
)
from .app import (
    EXIT_DECLINED,
    EXIT_EXTRA_MISSING,
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    Declined,
    exit_code,
    main,
)
from .common import memory_options
from .transfer import IMPORT_FORMATS, Importer

__all__ = [
    "EXIT_DECLINED",
    "EXIT_EXTRA_MISSING",
    "EXIT_INVALID",
    "EXIT_UNAVAILABLE",
    "IMPORT_FORMATS",
    "Declined",
    "Importer",
    "exit_code",
    "main",
    "memory_options",
]
