"""Every place that describes the shared deployment names one memory: one PostgreSQL database
and ``schema``, one Redis database and ``prefix``. A bot started from the README and the
compose file's sidecar replicas must share their memory, not each keep its own, silently.

The rule: the places that describe *the* shared deployment are README.md's "Scaling out"
section, docker-compose.yml (its comments included), everything under deploy/, the
Dockerfile's comments, and docs/sidecar.md's "Deploying" section. In them, every full
``postgresql://`` / ``redis://`` / ``redis+cluster://`` / ``redis+sentinel://`` URL (an
elided one, ``redis://…``, stands for the reader's own and is skipped) and every ``schema=`` /
``prefix=`` written out must name the same memory as the compose file's sidecars; an option
left out counts as what the library takes then (no ``schema``: PostgreSQL's search path,
``public``; no ``prefix``: the hot tier's default). Other docs may show other names as
examples of keeping two bots apart (README's URL table, ``prefix=bot1:``): they are not the
deployment, and not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from shortterm.model import urls

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"(?:postgres(?:ql)?|rediss?(?:\+cluster|\+sentinel)?)://[^\s\"'`)]+")
OPTION = re.compile(r"\b(schema|prefix)=([^&\s\"'`)]+)")
PUBLIC = "public (no schema=)"


def _section(path: Path, title: str) -> str:
    text = path.read_text("utf-8")
    found = re.search(rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text)
    assert found is not None, f"{path.name} has no '## {title}' section"
    return found.group(1)


def _described() -> dict[str, str]:
    """The text of every place that describes the shared deployment, by name."""
    places = {
        "README.md, Scaling out": _section(ROOT / "README.md", "Scaling out"),
        "docker-compose.yml": (ROOT / "docker-compose.yml").read_text("utf-8"),
        "Dockerfile (comments)": "\n".join(
            line
            for line in (ROOT / "Dockerfile").read_text("utf-8").splitlines()
            if line.lstrip().startswith("#")
        ),
        "docs/sidecar.md, Deploying": _section(ROOT / "docs" / "sidecar.md", "Deploying"),
    }
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file():
            places[str(path.relative_to(ROOT))] = path.read_text("utf-8")
    return places


def _memory(url: str) -> tuple[str, str, str]:
    """(tier, database, schema or prefix) as the library reads the URL."""
    if url.startswith("postgres"):
        rest, options = urls.split_options(
            url, schemes=("postgresql", "postgres"), ours=("schema",), wrong_scheme="?"
        )
        return "store", urlsplit(rest).path.lstrip("/"), options.get("schema") or PUBLIC
    from shortterm.cache.redis.client import open_url

    parts = urlsplit(url)
    path = parts.path.strip("/")
    if parts.scheme.endswith("+sentinel"):
        path = path.partition("/")[2]  # after the master's name
    db = path or dict(parse_qsl(parts.query)).get("db", "0")
    return "cache", db, open_url(url).prefix


def _found() -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """For each place: (what, where it was read, the memory it names)."""
    seen: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for place, text in _described().items():
        rows = seen.setdefault(place, [])
        for url in URL.findall(text):
            if "…" not in url and "..." not in url:
                rows.append((url, place, _memory(url)))
        for option, value in OPTION.findall(text):
            rows.append((f"{option}={value}", place, (option, value)))
    return seen


@pytest.fixture(scope="module")
def found() -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    pytest.importorskip("redis", reason="the redis extra is not installed")
    return _found()


def test_the_places_are_read(found: dict[str, list[tuple[str, str, tuple[str, ...]]]]) -> None:
    """Nothing passes by reading nothing: the README's block and its cluster example, and the
    compose file's comment and sidecars, are all seen."""
    assert len(found["README.md, Scaling out"]) >= 5
    assert len(found["docker-compose.yml"]) >= 6


def test_every_place_names_the_compose_sidecars_memory(
    found: dict[str, list[tuple[str, str, tuple[str, ...]]]],
) -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text("utf-8"))
    env = compose["services"]["sidecar"]["environment"]
    store, cache = _memory(env["SHORTTERM_STORE"]), _memory(env["SHORTTERM_CACHE"])
    expected = {
        "store": store,
        "cache": cache,
        "schema": ("schema", store[2]),
        "prefix": ("prefix", cache[2]),
    }
    wrong = [
        f"{place}: {what} names {memory}, not {expected[memory[0]]}"
        for rows in found.values()
        for what, place, memory in rows
        if memory != expected[memory[0]]
    ]
    assert not wrong, "\n".join(wrong)
    everything = {memory for rows in found.values() for _, _, memory in rows}
    assert everything == set(expected.values())  # one set: one store, one cache
