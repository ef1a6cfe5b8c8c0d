"""Backend URLs carrying our own query options beside the driver's.

Errors name a URL as :func:`shown_url` prints it, so a password never reaches a log.

PostgreSQL and Redis URLs both take options of ours (pool sizes, timeouts, a prefix) that the
driver must never see. One parser splits them off and one set of readers checks them, so both
backends accept the same spellings and fail with the same messages. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import ConfigError

__all__ = [
    "at_least_one",
    "checked_url",
    "non_negative_number",
    "positive_seconds",
    "shown_url",
    "split_options",
]

T = TypeVar("T", int, float)


def split_options(
    url: str, *, schemes: Collection[str], ours: Collection[str], wrong_scheme: str
) -> tuple[str, dict[str, str]]:
    """The URL without the options named in ``ours``, and those options (the last value of
    each wins). ``wrong_scheme`` is the message when the scheme is not one of ``schemes``."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ConfigError(wrong_scheme)
    own: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ours:
            own[name] = value
        else:
            theirs.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(theirs))), own


def positive_seconds(options: Mapping[str, str], name: str, default: float, url: str) -> float:
    """A duration that must be finite and above zero."""
    try:
        value = float(options.get(name, default))
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"{name} in {shown_url(url)!r} must be a positive number of seconds")
    return value


def at_least_one(options: Mapping[str, str], name: str, default: int, url: str) -> int:
    """A count (a pool size) that must be a whole number of at least 1."""
    return _checked(options, name, default, url, int, "an integer", _one_or_more, "be at least 1")


def non_negative_number(options: Mapping[str, str], name: str, default: float, url: str) -> float:
    """A finite number of zero or more (a retry count, a margin in seconds)."""
    return _checked(
        options, name, default, url, float, "a number", _finite_not_negative,
        "be a non-negative number",
    )  # fmt: skip


def _one_or_more(value: float) -> bool:
    return value >= 1


def _finite_not_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def _checked(
    options: Mapping[str, str],
    name: str,
    default: T,
    url: str,
    parse: Callable[[str], T],
    noun: str,
    allowed: Callable[[T], bool],
    must: str,
) -> T:
    """The option parsed and checked (``default`` when absent): a value that does not parse
    names ``noun``; one that is not ``allowed`` says what it ``must`` do."""
    value = _given(options, name, url, parse, noun)
    if value is None:
        return default
    if not allowed(value):
        raise ConfigError(f"{name}={options[name]!r} in {shown_url(url)!r} must {must}")
    return value


def _given(
    options: Mapping[str, str], name: str, url: str, parse: Callable[[str], T], noun: str
) -> T | None:
    """The option parsed, ``None`` when absent; a value that does not parse names ``noun``."""
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} in {shown_url(url)!r} is not {noun}") from None


def checked_url(url: str, what: str) -> SplitResult:
    """``url`` split into its parts, or a :class:`ConfigError` naming ``what`` (``store``,
    ``cache``) and urllib's reason when it cannot be: a bracket left open, a port that is
    not a number. Without this the first use of the URL fails deep in a driver."""
    try:
        parts = urlsplit(url)
        # Each host's port: a Redis Cluster's or Sentinel's URL lists several (h1:p1,h2:p2).
        for host in parts.netloc.rpartition("@")[2].split(","):
            urlsplit(f"//{host}").port  # noqa: B018 -- parsed only when asked: a bad one raises
    except ValueError as exc:
        raise ConfigError(f"{what}={shown_url(url)!r} is not a valid URL: {exc}") from None
    return parts


def shown_url(url: str) -> str:
    """A backend URL as printed or logged: any password (the URL's own, or an option named
    ``…password``, such as a Redis URL's ``sentinel_password``) replaced by ``***``."""
    if "://" not in url:  # not a URL (a scheme's "://" mistyped): hide a "user:password@"
        return _BARE_PASSWORD.sub(":***@", url)
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib can split: hide what may be a password by hand
        return _QUERY_PASSWORD.sub(r"\1***", _USER_PASSWORD.sub(r"\1***@", url))
    query = _in_option(_QUERY_PASSWORD.sub(r"\1***", parts.query))
    if parts.password is None and query == parts.query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


_QUERY_PASSWORD = re.compile(r"((?:^|&)[^=&]*password=)[^&]*")
_USER_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")
_BARE_PASSWORD = re.compile(r":[^/@:]*@")


def _in_option(query: str) -> str:
    """A URL given as an option (PostgreSQL's ``listen_url``), as is or percent-encoded: its
    password hidden as well."""
    return _ENCODED_PASSWORD.sub(r"\1***%40", _USER_PASSWORD.sub(r"\1***@", query))


_ENCODED_PASSWORD = re.compile(r"(%3A%2F%2F[^&/@]*?%3A)[^&/@]*?%40", re.IGNORECASE)
