"""An operator's first day: every failure says what it is, through the real command.

A PostgreSQL login refused for good (no such role, no such database) fails in seconds with the
server's own words, not after a 30 s timeout; an unknown URL option is one line naming it and
the accepted ones, not a traceback; a misspelled ``SHORTTERM_*`` variable is warned about, with
the variable it was probably meant to be; ``python -m shortterm`` is the command.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from shortterm.cli.app import EXIT_INVALID, EXIT_UNAVAILABLE
from tests.support import service_url, with_query

SHORTTERM = Path(sys.executable).with_name("shortterm")
SRC = Path(__file__).resolve().parents[1] / "src" / "shortterm"
BOUND_S = 5.0  # the promise for a refused login


def command(
    args: list[str], tmp_path: Path, *, env: dict[str, str] | None = None, timeout_s: float = 15
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``shortterm ARGS`` in ``tmp_path`` with no SHORTTERM_* variable but ``env``, to its exit
    (a command still running after ``timeout_s`` is killed and fails the test)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(SHORTTERM), *args],
            cwd=tmp_path,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"shortterm {' '.join(args)} still ran after {timeout_s} s: {exc.stderr!r}")
    return done, time.monotonic() - started


def error_line(stderr: str) -> str:
    """The one line that is not a warning (serve warns about PostgreSQL without Redis)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def pg_url() -> str:
    return service_url("SHORTTERM_TEST_POSTGRES_URL", "PostgreSQL")


def with_login(url: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{user}@{host}"  # no password: the role does not exist anyway
    path = parts.path if database is None else f"/{database}"
    return urlunsplit(parts._replace(netloc=netloc, path=path))


def no_such(what: str) -> str:
    return f"stm_no_{what}_{uuid.uuid4().hex[:10]}"


# -- a login PostgreSQL refuses for good ------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["migrate"], ["serve", "--port", "0"]],
    ids=["migrate", "serve"],
)
def test_a_role_that_does_not_exist_fails_at_once_with_the_servers_reason(
    args: list[str], tmp_path: Path
) -> None:
    role = no_such("role")
    done, elapsed = command([*args, "--store", with_login(pg_url(), user=role)], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert elapsed < BOUND_S, (elapsed, done.stderr)
    assert "PostgreSQL refused the connection" in line
    # Trust authentication (the test server): the role is unknown; password auth: refused.
    assert f'role "{role}" does not exist' in line or "authentication failed" in line, line


def test_a_database_that_does_not_exist_fails_at_once_with_the_servers_reason(
    tmp_path: Path,
) -> None:
    database = no_such("db")
    store = with_login(pg_url(), database=database)
    done, elapsed = command(["inspect", "--server", "333", "--store", store], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert elapsed < BOUND_S, (elapsed, done.stderr)
    assert f'PostgreSQL refused the connection: database "{database}" does not exist' in line


def test_a_refusal_is_told_from_a_server_that_may_yet_answer() -> None:
    psycopg = pytest.importorskip("psycopg")
    from shortterm.store.postgres.connection import refusal

    def failed(said: str) -> Exception:
        return psycopg.OperationalError(
            f'connection failed: connection to server at "10.0.0.5", port 5432 failed: {said}\n'
        )

    password = failed('FATAL:  password authentication failed for user "bot"')
    assert refusal(password) == 'password authentication failed for user "bot"'
    assert refusal(failed("fe_sendauth: no password supplied")) == "no password supplied"
    hba = refusal(failed('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "bot"'))
    assert hba is not None and hba.startswith("no pg_hba.conf entry")
    assert refusal(failed("FATAL:  the database system is starting up")) is None
    assert refusal(failed("FATAL:  sorry, too many clients already")) is None
    assert refusal(failed("Connection refused")) is None


# -- unknown URL options ----------------------------------------------------------------------


def redis_url() -> str:
    # The option is refused before anything connects: no Redis is needed for this.
    return os.environ.get("SHORTTERM_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    "args",
    [["serve", "--port", "0"], ["show", "server", "333", "222"]],
    ids=["serve", "show"],
)
def test_an_unknown_redis_option_is_one_line_naming_it(args: list[str], tmp_path: Path) -> None:
    cache = with_query(redis_url(), prefx="x:")
    done, _ = command([*args, "--store", "memory://", "--cache", cache], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_INVALID, done.stderr
    assert "unknown option 'prefx'" in line and "did you mean 'prefix'?" in line
    for accepted in ("prefix", "retries", "groups", "socket_timeout", "max_connections"):
        assert accepted in line, line
    assert "TypeError" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [["serve", "--port", "0"], ["inspect", "--server", "333"]],
    ids=["serve", "inspect"],
)
def test_an_unknown_postgres_option_is_one_line_naming_it(args: list[str], tmp_path: Path) -> None:
    # Refused before anything connects: no PostgreSQL is needed for this.
    base = os.environ.get("SHORTTERM_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1/test"
    store = with_query(base, pool_max_sise="4")
    done, _ = command([*args, "--store", store], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_INVALID, done.stderr
    assert "unknown option 'pool_max_sise'" in line and "did you mean 'pool_max_size'?" in line
    for accepted in ("schema", "operation_timeout_s", "connect_timeout", "application_name"):
        assert accepted in line, line
    assert "migration failed" not in line


MALFORMED = {
    "store-bracket": ("--store", "postgresql://bot:hunter2@[db.internal/test", "Invalid IPv6 URL"),
    "store-port": ("--store", "postgresql://bot:hunter2@db:54x2/test", "Port could not be cast"),
    "cache-bracket": ("--cache", "redis://:hunter2@[cache:6379/0", "Invalid IPv6 URL"),
}


@pytest.mark.parametrize("args", [["serve", "--port", "0"], ["inspect", "--server", "333"]])
@pytest.mark.parametrize("malformed", sorted(MALFORMED))
def test_a_url_that_does_not_parse_is_one_line_without_its_password(
    args: list[str], malformed: str, tmp_path: Path
) -> None:
    option, url, reason = MALFORMED[malformed]
    rest = ["--store", "memory://"] if option == "--cache" else []
    done, _ = command([*args, option, url, *rest], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_INVALID, done.stderr
    assert "is not a valid URL" in line and reason in line, line
    assert "hunter2" not in done.stderr


async def test_a_url_that_does_not_parse_is_a_config_error_at_open() -> None:
    import shortterm

    for option, url, reason in MALFORMED.values():
        store, cache = (url, "memory://") if option == "--store" else ("memory://", url)
        with pytest.raises(shortterm.ConfigError, match=reason) as raised:
            await shortterm.open(store=store, cache=cache)
        assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    ("option", "given", "hint"),
    [
        (
            "--cache",
            "rediss//cache.internal:6380/0",
            "did you mean rediss://cache.internal:6380/0?",
        ),
        ("--cache", "localhost:6379", "for example redis://localhost:6379/0"),
        (
            "--store",
            "postgresql//bot:hunter2@db/test",
            "did you mean postgresql://bot:***@db/test?",
        ),
        ("--store", "shortterm.db", "for example sqlite:///shortterm.db"),
    ],
)
def test_a_url_without_its_scheme_separator_names_the_fix_for_its_tier(
    option: str, given: str, hint: str, tmp_path: Path
) -> None:
    rest = ["--store", "memory://"] if option == "--cache" else []
    done, _ = command(["serve", "--port", "0", option, given, *rest], tmp_path)
    line = error_line(done.stderr)
    assert done.returncode == EXIT_INVALID, done.stderr
    assert "is not a URL" in line and hint in line, line
    assert "hunter2" not in done.stderr


# -- the environment --------------------------------------------------------------------------


def test_a_misspelled_variable_is_warned_about_with_the_close_match(tmp_path: Path) -> None:
    env = {"SHORTTERM_STOR": f"sqlite:///{tmp_path / 'bot.db'}", "SHORTTERM_TEST_ANYTHING": "1"}
    done, _ = command(["inspect", "--server", "333", "--store", "memory://"], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, done.stderr  # the test suite's own variables are not warned of
    assert "SHORTTERM_STOR " in warnings[0] and "did you mean SHORTTERM_STORE?" in warnings[0]


def test_the_known_variables_are_the_ones_shortterm_reads() -> None:
    """Every SHORTTERM_* name the code spells out, and every setting read by field name, is
    in the one list the warning checks (a reader added without it would be warned about)."""
    from shortterm.cli.environment import IGNORED_PREFIXES, KNOWN, unknown_variables
    from shortterm.sidecar.settings import SidecarSettings

    spelled = set()
    for path in SRC.rglob("*.py"):
        if path != SRC / "cli" / "environment.py":  # the list itself, and its examples
            spelled |= set(re.findall(r"\bSHORTTERM_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    spelled = {name for name in spelled if not name.startswith(IGNORED_PREFIXES)}
    sidecar = {f"SHORTTERM_{f.name.upper()}" for f in dataclasses.fields(SidecarSettings)}
    assert spelled | sidecar <= KNOWN, sorted((spelled | sidecar) - KNOWN)
    assert not list(unknown_variables(dict.fromkeys(KNOWN, "")))


def test_python_dash_m_shortterm_is_the_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shortterm", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m shortterm" in done.stdout
    for name in ("serve", "inspect", "migrate"):
        assert name in done.stdout
