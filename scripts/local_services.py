"""Whether PostgreSQL and Redis answer locally, as shell lines for ``make test`` to ``eval``.

::

    eval "$(.venv/bin/python scripts/local_services.py --postgres URL --redis URL)"

When both answer (a connection and one round trip each, 2 s at most), prints ``export
SHORTTERM_TEST_POSTGRES_URL=… SHORTTERM_TEST_REDIS_URL=…`` so their tests run; otherwise prints
nothing and the tests skip, with the reason they give. Variables already set are left alone
(CI sets them, and makes the services mandatory). What was decided goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from shortterm.model.urls import shown_url

TIMEOUT_S = 2

_VARIABLES = ("SHORTTERM_TEST_POSTGRES_URL", "SHORTTERM_TEST_REDIS_URL")


def postgres_answers(url: str) -> str | None:
    """``None`` when PostgreSQL answers at ``url``, else why not."""
    try:
        import psycopg
    except ModuleNotFoundError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(url, connect_timeout=TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def redis_answers(url: str) -> str | None:
    """``None`` when Redis answers a PING at ``url``, else why not."""
    try:
        import redis
    except ModuleNotFoundError:
        return "redis is not installed"
    client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        client.close()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", required=True, help="PostgreSQL URL to probe")
    parser.add_argument("--redis", required=True, help="Redis URL to probe")
    args = parser.parse_args(argv)
    if any(os.environ.get(name) for name in _VARIABLES):
        print("PostgreSQL/Redis tests: as SHORTTERM_TEST_* say", file=sys.stderr)
        return 0
    reasons = [
        f"{what} at {shown_url(url)}: {reason}"
        for what, url, reason in (
            ("PostgreSQL", args.postgres, postgres_answers(args.postgres)),
            ("Redis", args.redis, redis_answers(args.redis)),
        )
        if reason is not None
    ]
    if reasons:
        print(f"PostgreSQL/Redis tests skip ({'; '.join(reasons)})", file=sys.stderr)
        return 0
    shown = f"{shown_url(args.postgres)}, {shown_url(args.redis)}"
    print(f"PostgreSQL/Redis tests run: {shown}", file=sys.stderr)
    urls = (args.postgres, args.redis)
    pairs = zip(_VARIABLES, urls, strict=True)
    print("export " + " ".join(f"{name}={shlex.quote(url)}" for name, url in pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
