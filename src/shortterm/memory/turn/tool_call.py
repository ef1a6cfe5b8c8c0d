"""Running the tool for a turn: the durable write path of a summary upgrade.

A call is refused (``ok=False``) for an unknown name, a turn that may not use the tool, or
unusable arguments. Otherwise the scopes of :func:`rules.scopes_written` (the user scope and,
in a guild, the server scope of the turn's persona) are written in one durable transaction that
also zeroes the live cadence counter; ``ok=True`` is returned only after that commit, and the
hot tier is then updated from the committed rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model.errors import StoreUnavailable
from ...model.keys import ScopeKey
from ...tool import texts
from ...tool.arguments import Refused, parse_arguments
from ...tool.result import ToolResult
from ...tool.spec import ToolSpec, build_spec, field_names, renderer
from .. import rules
from ..turn_args import TurnArgs
from .guards import Lapsed, TurnGuard

if TYPE_CHECKING:
    from ..engine.engine import Engine

__all__ = ["ToolResult", "call_tool", "maintenance_due", "spec", "tools"]


def spec(snap: rules.Snapshot) -> ToolSpec:
    """The tool's definition for a turn under its server's settings."""
    config = snap.config
    return build_spec(
        snap.settings,
        max_categories=config.max_categories,
        max_summary_chars=config.max_summary_chars,
        bot_name=snap.args.bot_name,
    )


def tools(engine: Engine, args: TurnArgs, guard: TurnGuard, format: str) -> list[dict[str, Any]]:
    """The tool definitions to offer the turn in ``format``; empty when it may not be used."""
    render = renderer(format)  # an unknown format is an error even when nothing is offered
    snap = engine.snapshot(args)
    return [] if guard.refusal(snap) is not None else [render(spec(snap))]


def _refused(engine: Engine, message: str) -> ToolResult:
    engine.health.count("upgrade_refusals")
    return ToolResult(False, message)


async def call_tool(
    engine: Engine, args: TurnArgs, guard: TurnGuard, name: object, raw: object
) -> ToolResult:
    health = engine.health
    if name != texts.TOOL_NAME:
        shown = name[:80] if isinstance(name, str) else name
        return _refused(engine, texts.UNKNOWN_TOOL.format(name=shown, tool=texts.TOOL_NAME))
    # The fence first (the journal followed once, there): a forget after this point drops
    # the update in both tiers.
    fence = await engine.begin_write(args.user_id)
    try:
        await engine.look_back()
    except StoreUnavailable as exc:
        health.failed("settings refresh", exc)  # the cached settings still apply
    snap = engine.snapshot(args)
    reason = guard.refusal(snap)
    if reason is not None:
        return _refused(engine, reason)
    config = engine.config
    slugs = field_names(snap.settings, config.max_categories)
    try:
        change = parse_arguments(
            raw,
            slugs or ("summary",),
            categories=slugs is not None,
            max_chars=config.max_summary_chars,
        )
    except Refused as exc:
        return _refused(engine, str(exc))
    meta = rules.scope_meta(rules.meta_parts(snap, args.persona_lineage_id))
    scopes, live = rules.scopes_written(snap, args.persona_id)
    taken = await guard.claim()
    if isinstance(taken, Lapsed):
        taken = await _take_over(engine, guard, scopes, taken)
    if taken is not None:
        return _refused(engine, taken)
    try:
        rows = await engine.write_distilled(
            rules.DistilledPlan([(key, meta) for key in scopes], change, live),
            fence=fence.covering(guard.targets),  # whoever takes the claim over fences it
            committed=lambda written: guard.committed(len(written) == len(scopes)),
        )
    except StoreUnavailable as exc:
        health.failed("tool call", exc)
        health.count("upgrade_refusals")
        if exc.maybe_applied:
            guard.upgraded = True  # it may have landed: never a second one on this turn
            return ToolResult(False, texts.STORE_UNSURE)
        return ToolResult(False, texts.STORE_DOWN)
    else:
        if len(rows) == len(scopes):
            guard.upgraded = True
    finally:
        await guard.release()
    health.ok()
    if len(rows) < len(scopes):
        # A forget overtook the update; what did land (if anything) is removed by it.
        health.count("upgrade_refusals")
        return ToolResult(False, texts.OVERTAKEN)
    health.count("upgrades")
    return ToolResult(True, texts.OK)


async def _take_over(
    engine: Engine, guard: TurnGuard, scopes: list[ScopeKey], lapsed: Lapsed
) -> str | None:
    """The claim is ours, taken over from calls that never finished (their process died):
    ``None`` when none of their writes landed (they never will now), so this call writes;
    otherwise the refusal, the turn being upgraded."""
    try:
        landed = await engine.take_over_upgrade(scopes, since=lapsed.since, targets=lapsed.targets)
    except StoreUnavailable as exc:
        engine.health.failed("tool call", exc)
        await guard.release()  # not decided: the next call that claims decides it
        return texts.STORE_DOWN
    if landed:
        guard.upgraded = True
        await guard.release()
        return texts.ALREADY
    return None


async def maintenance_due(engine: Engine, args: TurnArgs, guard: TurnGuard) -> bool:
    """True when the tool may be used and the live counter reached the server's cadence."""
    health = engine.health
    try:
        await engine.refresh_settings()
    except StoreUnavailable as exc:
        health.failed("settings refresh", exc)
    snap = engine.snapshot(args)
    if guard.refusal(snap) is not None:
        return False
    key = rules.live_scope(snap, args.persona_id)
    now = engine.clock()
    count = await engine.tiers.cache.counter(key, now)
    if count is None:
        try:
            row = await engine.read_through(key, now)
        except StoreUnavailable as exc:
            health.failed("counter read", exc)
            return False
        health.ok()
        if row is None:
            return False  # never captured: nothing to maintain yet
        count = row.turns_since_refresh
    return count >= snap.settings.refresh_cadence
