"""The distiller: summaries for bots whose model does not call the tool.

:func:`distill` walks the scopes the hot tier holds (crude messages live there only), picks
the live scopes whose cadence counter reached their server's ``refresh_cadence`` (the rule
``maintenance_due`` applies to a turn), asks an OpenAI-compatible chat endpoint for their new
notes and writes them through the tool's own fenced path (``Memory.write`` of a
``rules.DistilledPlan``): the
fence is taken before the scope is read, and the write carries the user target of every author
it showed the model (and a DM's owner), so a forget that lands while the model thinks wins.

It sends only what the read path would show in the scope's own channel: no private channel's
scope (unless its server bypasses privacy), no message of a user with full privacy, nothing of
a DM whose user keeps nothing personal, and one scope (one persona) per request. Bounded: a
per-run cap, a scan cap, a concurrency limit, timeouts, retries with backoff and a byte cap on
each answer. A model that fails is reported per scope and nothing is written or reset for it;
after a scope failed for good, no new request is started in that run. An answer that cannot
be used (too large, malformed, of the wrong types) fails its own scope only.

Needs httpx (the ``[openai]`` extra brings it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cache.base import ScopeLister
from ..model import Entry, Message, ScopeKey
from ..model.errors import ExtraMissing, InvalidInput, ShortTermError, StoreUnavailable
from ..model.fence import user_target
from ..prompt.distill import answer_arguments, distill_messages
from ..prompt.render import category_labels
from ..tool.arguments import Refused, kind_of, parse_arguments
from ..tool.spec import field_names
from . import rules

if TYPE_CHECKING:
    from .facade import Memory

__all__ = ["DistillReport", "DistillSchedule", "ModelFailed", "distill", "distill_forever", "run"]

_SCAN_BATCH = 500
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_MAX_ANSWER_CHARS = 200_000
# The body of one answer is read up to this many bytes, never more: a body over it fails its
# scope while it is read (a 64 MB body read whole, then parsed, cost ~200 MB). The answer's
# text is cut to _MAX_ANSWER_CHARS characters; JSON may spell each as an escaped surrogate pair
# (12 bytes), around an envelope and what some endpoints add (usage, reasoning text): 20 bytes
# a character (4 MB) leaves room for all of that.
_MAX_ANSWER_BYTES = 20 * _MAX_ANSWER_CHARS
_MAX_ERROR_BYTES = 4096  # of an error's body: its first 300 characters are shown

log = logging.getLogger("shortterm.distill")


class ModelFailed(ShortTermError):
    """The chat endpoint did not give a usable answer (after the retries)."""


class _Unusable(ModelFailed):
    """An answer that cannot be used (too large, not a chat completion, or refused by the
    tool's own checks): that scope fails, the run goes on."""


@dataclass
class DistillReport:
    """What one run did. ``skipped`` counts scopes per reason; ``failed`` names each scope
    whose model call or write failed, with why (nothing was written or reset for them)."""

    looked: int = 0
    distilled: list[ScopeKey] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: list[tuple[ScopeKey, str]] = field(default_factory=list)
    capped: bool = False  # the per-run cap stopped the walk: more may be due
    error: str | None = None  # the run itself failed (the store or hot tier down)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


Poster = Callable[[list[dict[str, str]]], Awaitable[str]]


def _check_positive(name: str, value: object, *, real: bool = False) -> None:
    kinds = (int, float) if real else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise InvalidInput(name, value, "a positive number" if real else "a positive integer")


def _check_url_and_model(base_url: object, model: object) -> None:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise InvalidInput("base_url", base_url, "an http:// or https:// URL")
    if not isinstance(model, str) or not model:
        raise InvalidInput("model", model, "a model name")


async def distill(
    memory: Memory,
    *,
    base_url: str,
    model: str,
    api_key: str | None = None,
    concurrency: int = 4,
    limit: int = 100,
    scan_limit: int = 100_000,
    timeout_s: float = 60.0,
    retries: int = 2,
    bot_name: str = "Assistant",
) -> DistillReport:
    """Distill every due scope the hot tier holds (at most ``limit`` model calls, at most
    ``scan_limit`` scopes looked at) through the chat endpoint at ``base_url`` (the ``/v1``
    URL); returns a :class:`DistillReport`."""
    _check_url_and_model(base_url, model)
    _check_positive("concurrency", concurrency)
    _check_positive("limit", limit)
    _check_positive("scan_limit", scan_limit)
    _check_positive("timeout_s", timeout_s, real=True)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInput("retries", retries, "a non-negative integer")
    try:
        import httpx
    except ModuleNotFoundError as exc:
        raise ExtraMissing("openai", exc.name or "httpx") from exc
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(
        base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
    ) as client:

        async def post(messages: list[dict[str, str]]) -> str:
            return await _complete(client, model, messages, retries=retries, timeout_s=timeout_s)

        return await run(
            memory,
            post,
            concurrency=concurrency,
            limit=limit,
            scan_limit=scan_limit,
            bot_name=bot_name,
        )


async def _complete(
    client: Any, model: str, messages: list[dict[str, str]], *, retries: int, timeout_s: float
) -> str:
    """One chat completion's text, retried with backoff on what may pass (a refused
    connection, a timeout, 429, 5xx). Each attempt has ``timeout_s`` for the whole answer, so
    a model trickling its body cannot hold the run."""
    import httpx

    body = {"model": model, "messages": messages, "temperature": 0}
    for attempt in range(retries + 1):
        last = attempt == retries
        try:
            async with asyncio.timeout(timeout_s):
                status, raw = await _post(client, body)
        except (httpx.HTTPError, TimeoutError) as exc:
            if last:
                raise ModelFailed(f"{client.base_url} did not answer ({exc!r})") from exc
        else:
            if status == 200:
                return _answer_text(raw)
            error = f"{client.base_url} answered {status}: {_excerpt(raw)}"
            if last or status not in _RETRY_STATUS:
                raise ModelFailed(error)
        await asyncio.sleep(0.5 * 2**attempt * (0.5 + random.random()))
    raise AssertionError("unreachable")


async def _post(client: Any, body: dict[str, Any]) -> tuple[int, bytes]:
    """The status and body of one call, the body read in chunks up to its cap: a 200 over
    :data:`_MAX_ANSWER_BYTES` is :class:`_Unusable`, an error's body is cut."""
    # No compression: a small compressed chunk could inflate past the cap in one piece.
    headers = {"Accept-Encoding": "identity"}
    async with client.stream("POST", "/chat/completions", json=body, headers=headers) as response:
        status = int(response.status_code)
        cap = _MAX_ANSWER_BYTES if status == 200 else _MAX_ERROR_BYTES
        if status == 200 and _declared_over(response.headers.get("content-length", ""), cap):
            raise _too_large()  # said up front: not a byte of it is read
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > cap:
                if status == 200:
                    raise _too_large()
                del raw[cap:]
                break  # leaving the block closes the connection: the rest is never read
        return status, bytes(raw)


def _declared_over(length: str, cap: int) -> bool:
    """Whether a Content-Length says more than ``cap`` bytes (one that is not a number is left
    to the HTTP parser; a long one is not converted: int() refuses 4,300 digits)."""
    length = length.strip()
    if not (length.isascii() and length.isdigit()):
        return False
    return len(length) > len(str(cap)) or int(length) > cap


def _too_large() -> _Unusable:
    return _Unusable(f"the answer is too large: over the cap of {_MAX_ANSWER_BYTES:,} bytes")


def _excerpt(raw: bytes) -> str:
    """The start of a body, on one line."""
    return repr(raw[:300].decode("utf-8", errors="replace"))


def _answer_text(raw: bytes) -> str:
    """The text of a chat completion's body. Anything else (not UTF-8, not JSON, nested too
    deeply for the parser, the wrong shape or types) is :class:`_Unusable`: that scope fails,
    the run goes on."""
    try:
        data = json.loads(raw)
    except RecursionError as exc:
        raise _Unusable("the answer is not a chat completion: JSON nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise _Unusable(
            f"the answer is not a chat completion: not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from exc
    except ValueError as exc:
        raise _Unusable(
            f"the answer is not a chat completion: not JSON ({exc}): {_excerpt(raw)}"
        ) from exc
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise _Unusable(
            f"the answer is not a chat completion (no choices[0].message.content): {_excerpt(raw)}"
        ) from exc
    if not isinstance(content, str):
        raise _Unusable(f"the model answered {kind_of(content)} where its text belongs")
    if not content.strip():
        raise _Unusable("the model answered with no text")
    return content[:_MAX_ANSWER_CHARS]


async def run(
    memory: Memory,
    post: Poster,
    *,
    concurrency: int = 4,
    limit: int = 100,
    scan_limit: int = 100_000,
    bot_name: str = "Assistant",
) -> DistillReport:
    """:func:`distill` with the model call given (``post`` takes the chat messages and
    returns the answer's text, or raises :class:`ModelFailed`)."""
    cache = memory.cache
    report = DistillReport()
    if not isinstance(cache, ScopeLister):
        report.skip("the hot tier cannot list its scopes")
        return report
    try:
        await memory.refresh_settings()
    except StoreUnavailable as exc:
        memory.health.failed("settings refresh", exc)
    gate = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()
    stop = asyncio.Event()  # a model that failed for good: start nothing more
    try:
        async with contextlib.aclosing(_walk(cache, report, scan_limit)) as keys:
            async for key in keys:
                if stop.is_set():
                    break
                if not await _looks_due(memory, key, report):
                    continue
                if len(tasks) >= limit:
                    report.capped = True
                    break
                await gate.acquire()
                if stop.is_set():  # a call that failed while we waited for a slot
                    gate.release()
                    break
                task = asyncio.create_task(_one(memory, key, post, report, stop, bot_name))
                task.add_done_callback(lambda _t: gate.release())
                tasks.add(task)
        await asyncio.gather(*tasks)
    except BaseException:
        # Cancelled (the sidecar stopping), the hot tier failed or a scope's task raised what
        # no one foresaw: no call outlives the run.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return report


async def _walk(
    cache: ScopeLister, report: DistillReport, scan_limit: int
) -> AsyncGenerator[ScopeKey, None]:
    """The keys the hot tier holds, each once, at most ``scan_limit`` of them."""
    seen: set[ScopeKey] = set()
    async for batch in cache.scope_keys(batch=_SCAN_BATCH):
        for key in batch:
            if key in seen:
                continue
            if report.looked >= scan_limit:
                report.capped = True
                return
            seen.add(key)
            report.looked += 1
            yield key


def _is_live(key: ScopeKey, entry: Entry) -> bool:
    """A channel's live scope (summary and counter): the server scope, or a DM's user scope."""
    return key.kind == "server" or entry.server_id is None


async def _looks_due(memory: Memory, key: ScopeKey, report: DistillReport) -> bool:
    """The cheap first look (no fence, no durable read): a counter at the cadence."""
    entry = await memory.cache.get(key, memory.clock())
    if entry is None or not _is_live(key, entry):
        report.skip("not a live scope")
        return False
    settings = memory.known_settings.server(entry.server_id)
    if entry.turns_since_refresh < settings.refresh_cadence:
        report.skip("not due")
        return False
    return True


def shown_authors(key: ScopeKey, messages: list[Message]) -> set[str]:
    """The users whose words a distill of ``key`` shows the model: every author of
    ``messages``, and a user scope's (a DM's) owner."""
    out = {m.author_id for m in messages if m.author_id is not None}
    if key.kind == "user":
        out.add(key.owner_id)
    return out


async def _one(
    memory: Memory,
    key: ScopeKey,
    post: Poster,
    report: DistillReport,
    stop: asyncio.Event,
    bot_name: str,
) -> None:
    try:
        outcome = await _distill_scope(memory, key, post, bot_name)
    except (ModelFailed, StoreUnavailable) as exc:
        report.failed.append((key, str(exc)))
        if isinstance(exc, ModelFailed) and not isinstance(exc, _Unusable):
            stop.set()  # a model that failed after its retries: start nothing more
        return
    if outcome is None:
        report.distilled.append(key)
    else:
        report.skip(outcome)


async def _distill_scope(memory: Memory, key: ScopeKey, post: Poster, bot_name: str) -> str | None:
    """Distill one scope; ``None`` when written, else why not."""
    # The fence first: a forget from here on refuses the write, in both tiers.
    fence = await memory.begin_write()
    entry = await memory.get(key)
    if entry is None:
        return "gone"
    known = memory.known_settings
    settings = known.server(entry.server_id)
    reason = rules.distill_refusal(entry, settings, known.user(key.owner_id))
    if reason is not None:
        return reason
    # What the read path would show of the scope, read as its owner would.
    messages = rules.shown_messages(entry, key.owner_id, known.full_privacy_users)
    if not messages:
        return "no messages to distill"
    # The write also carries every author it shows the model (and a DM's owner): a purge, a
    # FULL or a PARTIAL of any of them landing while the model thinks refuses it.
    fence = fence.covering(user_target(a) for a in shown_authors(key, messages))
    config = memory.config
    slugs = field_names(settings, config.max_categories)
    labels = category_labels(settings) if slugs is not None else None
    request = distill_messages(
        entry, messages, labels=labels, max_chars=config.max_summary_chars, bot_name=bot_name
    )
    answer = await post(request)
    try:
        change = parse_arguments(
            answer_arguments(answer, categories=slugs is not None),
            slugs or ("summary",),
            categories=slugs is not None,
            max_chars=config.max_summary_chars,
        )
    except Refused as exc:
        raise _Unusable(f"the model's answer is not usable: {exc}") from exc
    plan = rules.DistilledPlan([(key, rules.meta_of(entry))], change, key)
    rows = await memory.write(plan, fence=fence)
    if not rows:
        return "a forget overtook it"
    memory.health.count("upgrades")
    return None


@dataclass(frozen=True)
class DistillSchedule:
    """The sidecar's background distiller: :func:`distill` every ``interval_s`` seconds."""

    base_url: str
    model: str
    api_key: str | None = None
    interval_s: float = 300.0
    concurrency: int = 2
    limit: int = 100

    def __post_init__(self) -> None:
        # Checked when the sidecar starts, not at the first run an interval later.
        _check_url_and_model(self.base_url, self.model)
        _check_positive("interval_s", self.interval_s, real=True)
        _check_positive("concurrency", self.concurrency)
        _check_positive("limit", self.limit)


async def distill_forever(
    memory: Memory, schedule: DistillSchedule, *, on_report: Callable[[DistillReport], None]
) -> None:
    """Run :func:`distill` every ``schedule.interval_s`` seconds until cancelled. A run that
    fails (the store down, a model that does not answer, any exception) is reported and the
    next one comes at its time: the task ends only when cancelled and never holds a turn up
    (it shares no lock with turns; its writes are the tool's fenced writes)."""
    while True:
        await asyncio.sleep(schedule.interval_s)
        try:
            report = await distill(
                memory,
                base_url=schedule.base_url,
                model=schedule.model,
                api_key=schedule.api_key,
                concurrency=schedule.concurrency,
                limit=schedule.limit,
            )
        except StoreUnavailable as exc:
            memory.health.failed("distill", exc)
            report = DistillReport(error=str(exc))
        except ShortTermError as exc:  # e.g. the httpx extra missing: said at every run
            report = DistillReport(error=str(exc))
        except Exception as exc:
            # Whatever no one foresaw fails this run only (CancelledError is no Exception:
            # it still stops the task). The traceback goes to the log, the cause to the report.
            log.error("a distill run raised %s: %s", type(exc).__name__, exc, exc_info=exc)
            report = DistillReport(error=f"{type(exc).__name__}: {exc}")
        try:
            on_report(report)
        except Exception:
            log.exception("the distill report could not be handled")
