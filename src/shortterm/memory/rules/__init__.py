"""The rules of a turn, as pure functions over a frozen snapshot: the privacy contract in code.

A :class:`Snapshot` is what a turn is (its :class:`TurnArgs`), under the settings known when
it was taken (the server's settings, the user's effective privacy) and the limits of the
configuration. Everything a turn decides is decided here, with no I/O and no tier, one
concern per module:

* ``snapshot``: which scopes a turn writes (capture and upgrade alike), which one is live,
  and what a written scope records of where it was written;
* ``capture``: which history a capture admits, the plan of the whole capture, and the plans
  of the surfaces that write scopes themselves (an import, a pop);
* ``horizons``: what a clear, a purge or a FULL choice still covers when the platform passes
  its history back;
* ``tool``: whether the tool may be used (and if not, why), and whether the distiller may
  distill;
* ``privacy``: what a user's stored choice means, and what recall may show (which owners'
  entries, which private entries, which messages).

The engine carries the plans out; these functions never see it.
"""

from __future__ import annotations

from .capture import (
    CapturePlan,
    DistilledPlan,
    admitted,
    import_plan,
    plan_capture,
    pop_plan,
    popped_index,
)
from .horizons import outside_horizons, plan_outside_horizons
from .privacy import (
    hidden_as_private,
    importable,
    is_forgotten,
    keeps_personal,
    kept_on_clear,
    origin,
    reads_live,
    reads_personal,
    recalled_personal,
    server_of,
    shown_messages,
)
from .snapshot import (
    Snapshot,
    effective_privacy,
    here_private,
    live_scope,
    meta_of,
    meta_parts,
    scope_meta,
    scopes_written,
)
from .tool import distill_refusal, refusal, tool_possible, unavailable

__all__ = [
    "CapturePlan",
    "DistilledPlan",
    "Snapshot",
    "admitted",
    "distill_refusal",
    "effective_privacy",
    "here_private",
    "hidden_as_private",
    "import_plan",
    "importable",
    "is_forgotten",
    "keeps_personal",
    "kept_on_clear",
    "live_scope",
    "meta_of",
    "meta_parts",
    "origin",
    "outside_horizons",
    "plan_capture",
    "plan_outside_horizons",
    "pop_plan",
    "popped_index",
    "reads_live",
    "reads_personal",
    "recalled_personal",
    "refusal",
    "scope_meta",
    "scopes_written",
    "server_of",
    "shown_messages",
    "tool_possible",
    "unavailable",
]
