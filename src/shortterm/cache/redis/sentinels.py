"""Finding the master through Redis Sentinel, with a one-line answer when it cannot be found.

redis-py's discovery error lists every sentinel by its client's repr, kilobytes of connection
arguments, and tells a wrong master name, a wrong sentinel password, a plain Redis listed as a
sentinel and a sentinel that is down apart only inside those reprs. :class:`Sentinels` asks the
same way (the first sentinel that sees the master up answers, and moves to the front), and
when none does says, per distinct reason, which sentinels gave it, and what to change.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .failures import SentinelFailure, certificate_problem, login_refused, tls_only

__all__ = ["NoMaster", "Sentinels"]

_SHOWN_ADDRESSES = 3  # a reason lists this many sentinels, then how many more


class NoMaster(MasterNotFoundError, SentinelFailure):
    """No sentinel named the master: the reasons, one line. A ConnectionError, so a call
    retries it (a failover may be under way) within its bound."""

    def __init__(self, message: str, *, for_good: bool) -> None:
        super().__init__(message)
        self.for_good = for_good


class Sentinels(Sentinel):
    """redis-py's Sentinel, whose discovery failure is :class:`NoMaster`."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        failed: dict[str, list[str]] = {}  # reason -> the sentinels that gave it
        for_good = False  # some sentinel's reason will not change by itself
        monitored: set[str] = set()  # masters the sentinels that answered watch
        answered: list[str] = []
        down: list[str] = []
        for number, sentinel in enumerate(self.sentinels):
            where = _address(sentinel)
            try:
                masters: dict[str, Any] = await sentinel.sentinel_masters()  # type: ignore[assignment]
            except (RedisConnectionError, ResponseError, RedisTimeoutError) as exc:
                reason, permanent = await _reason(exc, where)
                failed.setdefault(reason, []).append(where)
                for_good = for_good or permanent
                continue
            answered.append(where)
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                ip = self._force_master_ip if self._force_master_ip is not None else state["ip"]
                return ip, int(state["port"])
            if state:
                down.append(where)
            monitored.update(str(name) for name in masters)
        raise NoMaster(
            _message(service_name, failed, answered, down, sorted(monitored)),
            # A name no answering sentinel monitors is the URL's to fix.
            for_good=for_good or (bool(answered) and not down),
        )


def _address(sentinel: Any) -> str:
    kwargs = sentinel.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


def _listed(addresses: list[str]) -> str:
    shown = ", ".join(addresses[:_SHOWN_ADDRESSES])
    more = len(addresses) - _SHOWN_ADDRESSES
    return shown + (f" and {more} more" if more > 0 else "")


async def _reason(exc: BaseException, where: str) -> tuple[str, bool]:
    """Why the sentinel at ``where`` did not answer, and whether that is for good."""
    said = str(exc)
    if isinstance(exc, ResponseError) and "sentinel" in said.lower():
        return (
            "is not a sentinel (a Redis server? list the sentinels, port 26379 by default; "
            "one Redis without Sentinel is redis://host:6379/0)",
            True,
        )
    problem = certificate_problem(exc)
    if problem is not None:
        return f"failed the TLS handshake: {problem}", True
    refused = login_refused(exc, "sentinel_password (the sentinels' own, not the master's)")
    if refused is not None:
        return refused, True
    if await tls_only(where, exc):
        return "speaks TLS only: use rediss+sentinel://", True
    if isinstance(exc, RedisTimeoutError):
        return "did not answer in time", False
    if "refused" in said.lower() or "Connect call failed" in said:
        return "refused the connection", False
    if "Name or service not known" in said or "not known" in said:
        return "is a host name that does not resolve", False
    # Anything else, in redis-py's words, without a client's repr.
    return said.split(" : ", 1)[-1][:100], False


def _message(
    name: str,
    failed: dict[str, list[str]],
    answered: list[str],
    down: list[str],
    monitored: list[str],
) -> str:
    parts = [f"{_listed(where)} {reason}" for reason, where in failed.items()]
    if down:
        parts.insert(
            0,
            f"{_listed(down)} see it down (a failover under way, or needed)",
        )
    elif answered:
        watched = ", ".join(map(repr, monitored[:5])) or "none"
        parts.insert(
            0,
            f"{_listed(answered)} monitor no master of that name (they monitor {watched}): "
            "fix the name after the sentinels in the cache URL",
        )
    elif all(reason == "refused the connection" for reason in failed):
        parts[-1] += " (are the sentinels running there?)"
    return f"Sentinel could not name master {name!r}: " + "; ".join(parts)
