"""Running the tool for a turn: the durable write path of a summary upgrade.

A call is refused (``ok=False``) for an unknown name, a turn that may not use the tool, or
unusable arguments. Otherwise the user scope and, in a guild, the server scope of the turn's
persona are written in one durable transaction that also zeroes the live cadence counter;
``ok=True`` is returned only after that commit, and the hot tier is then updated from the
committed rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import Privacy, ScopeKey
from ..model.errors import StoreUnavailable
from ..tool import texts
from ..tool.arguments import Refused, parse_arguments
from ..tool.result import ToolResult
from ..tool.spec import ToolSpec, build_spec, field_names, renderer
from .guards import refusal

if TYPE_CHECKING:
    from .turn import Turn

__all__ = ["ToolResult", "call_tool", "maintenance_due", "tools", "turn_spec"]


def turn_spec(turn: Turn) -> ToolSpec:
    config = turn.memory.config
    return build_spec(
        turn.settings,
        max_categories=config.max_categories,
        max_summary_chars=config.max_summary_chars,
        bot_name=turn.bot_name,
    )


def tools(turn: Turn, format: str = "openai") -> list[dict[str, Any]]:
    """The tool definitions to offer this turn in ``format``; empty when it may not be used."""
    render = renderer(format)  # an unknown format is an error even when nothing is offered
    return [] if refusal(turn) is not None else [render(turn_spec(turn))]


def _refused(turn: Turn, message: str) -> ToolResult:
    turn.memory.health.count("upgrade_refusals")
    return ToolResult(False, message)


def _scopes(turn: Turn, privacy: Privacy) -> tuple[list[ScopeKey], ScopeKey]:
    """The scopes an upgrade writes, and the live one among them."""
    user = turn.user_key(turn.persona_id)
    server = turn.server_key(turn.persona_id)
    if server is None:
        return [user], user  # a DM; partial privacy was refused by the guards
    if privacy is Privacy.PARTIAL:
        return [server], server
    return [user, server], server


async def call_tool(turn: Turn, name: object, args: object) -> ToolResult:
    memory = turn.memory
    if name != texts.TOOL_NAME:
        shown = name[:80] if isinstance(name, str) else name
        return _refused(turn, texts.UNKNOWN_TOOL.format(name=shown, tool=texts.TOOL_NAME))
    # The fence first: a forget after this point drops the update in both tiers.
    fence = await memory.begin_write(turn.user_id)
    try:
        await memory.refresh_settings()
    except StoreUnavailable as exc:
        memory.health.failed("settings refresh", exc)  # the cached settings still apply
    privacy = turn.effective_privacy()
    reason = refusal(turn, privacy)
    if reason is not None:
        return _refused(turn, reason)
    config = memory.config
    slugs = field_names(turn.settings, config.max_categories)
    try:
        change = parse_arguments(
            args,
            slugs or ("summary",),
            categories=slugs is not None,
            max_chars=config.max_summary_chars,
        )
    except Refused as exc:
        return _refused(turn, str(exc))
    meta = turn.meta(turn.persona_lineage_id)
    scopes, live = _scopes(turn, privacy)
    shared = turn._shared
    if shared is not None:
        taken = await shared.claim()  # other processes serving this turn see it too
        if taken is not None:
            return _refused(turn, taken)
    turn._upgrading = True  # a parallel call on this turn is refused while this one runs
    try:
        rows = await memory.write_distilled(
            [(key, meta) for key in scopes], change, reset_counter=live, fence=fence
        )
    except StoreUnavailable as exc:
        memory.health.failed("tool call", exc)
        memory.health.count("upgrade_refusals")
        if exc.maybe_applied:
            turn.upgraded = True  # it may have landed: never a second one on this turn
            return ToolResult(False, texts.STORE_UNSURE)
        return ToolResult(False, texts.STORE_DOWN)
    else:
        if len(rows) == len(scopes):
            turn.upgraded = True
    finally:
        turn._upgrading = False
        if shared is not None:
            await shared.settle(turn.upgraded)
    memory.health.ok()
    if len(rows) < len(scopes):
        # A forget overtook the update; what did land (if anything) is removed by it.
        memory.health.count("upgrade_refusals")
        return ToolResult(False, texts.OVERTAKEN)
    memory.health.count("upgrades")
    return ToolResult(True, texts.OK)


async def maintenance_due(turn: Turn) -> bool:
    """True when the tool may be used and the live counter reached the server's cadence."""
    memory = turn.memory
    try:
        await memory.refresh_settings()
    except StoreUnavailable as exc:
        memory.health.failed("settings refresh", exc)
    if refusal(turn) is not None:
        return False
    key, now = turn.live_key, memory.clock()
    count = await memory.cache.counter(key, now)
    if count is None:
        try:
            row = await memory.read_through(key, now)
        except StoreUnavailable as exc:
            memory.health.failed("counter read", exc)
            return False
        memory.health.ok()
        if row is None:
            return False  # never captured: nothing to maintain yet
        count = row.turns_since_refresh
    return count >= turn.settings.refresh_cadence
