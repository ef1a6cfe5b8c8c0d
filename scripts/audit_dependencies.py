"""Known vulnerabilities of the installed distributions, from PyPI's project JSON API.

Run on demand (not part of the test suite)::

    .venv/bin/python scripts/audit_dependencies.py                  # the running environment
    python3 scripts/audit_dependencies.py --path .venv/lib/python3.11/site-packages
    .venv/bin/python scripts/audit_dependencies.py --json report.json --strict

A stopgap for networks where ``pip-audit`` cannot work: its ``pypi`` service reads the
per-version endpoint ``/pypi/<name>/<version>/json`` and its ``osv`` service reads
api.osv.dev. This script reads only the project endpoint ``/pypi/<name>/json``, whose
``vulnerabilities`` list PyPI computes for the *latest* release (``info.version``). So:

* installed version == latest release: the list applies to what is installed. Each entry is
  a finding (``vulnerable``); an empty list means ``clean``.
* installed version != latest release: ``unverified``. The latest release's list is shown
  for reference only; it says nothing about the installed version (an older version may
  have more advisories, a newer pre-release fewer).
* ``not-on-pypi``: the index has no project of that name.
* ``local``: installed from a directory or a URL (PEP 610 ``direct_url.json``), not from
  the index, so a PyPI project of the same name may be another thing.
* ``error``: the request failed; the message says how.

Versions are compared as strings, after trimming whitespace: a release spelled differently
on PyPI than in the installed metadata counts as unverified, never as clean.

Exit status: 1 if any finding applies to an installed version; otherwise 2 if ``--strict``
is given and some distribution could not be verified; otherwise 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

PYPI_PROJECT_URL = "https://pypi.org/pypi/{name}/json"
USER_AGENT = "shortterm-audit-dependencies/1 (+urllib)"

VULNERABLE = "vulnerable"
CLEAN = "clean"
UNVERIFIED = "unverified"
NOT_ON_PYPI = "not-on-pypi"
LOCAL = "local"
ERROR = "error"
NOT_VERIFIED = (UNVERIFIED, NOT_ON_PYPI, LOCAL, ERROR)


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    local: bool = False


@dataclass(frozen=True)
class Advisory:
    id: str
    aliases: list[str]
    summary: str
    fixed_in: list[str]
    link: str
    withdrawn: str | None


@dataclass
class Result:
    name: str
    installed: str
    status: str
    latest: str | None = None
    detail: str = ""
    # Advisories that apply to the installed version (status "vulnerable" only).
    findings: list[Advisory] = field(default_factory=list)
    # Advisories PyPI lists for the latest release when that is NOT the installed version:
    # for reference, they tell nothing about the installed one.
    latest_release_advisories: list[Advisory] = field(default_factory=list)
    # Advisories PyPI marks as withdrawn (never counted as findings).
    withdrawn: list[Advisory] = field(default_factory=list)


class FetchError(Exception):
    """The project JSON could not be read; the message says why."""


class NotOnPyPI(Exception):
    """The index answered 404 for the project."""


def canonical_name(name: str) -> str:
    """PEP 503 normalisation: runs of ``-``, ``_`` and ``.`` become one ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_local(dist: metadata.Distribution) -> bool:
    # PEP 610: pip writes this record only for requirements given as a directory, a file or
    # a URL, never for a release resolved from the index.
    return bool(dist.read_text("direct_url.json"))


def installed_distributions(path: str | None) -> list[Installed]:
    """The distributions on ``path`` (or the running interpreter's ``sys.path``).

    When one name is installed twice, the first found wins, as it would on import.
    """
    dists = metadata.distributions(path=[path]) if path else metadata.distributions()
    seen: dict[str, Installed] = {}
    for dist in dists:
        raw_name = dist.metadata["Name"]
        if not raw_name:
            continue
        key = canonical_name(raw_name)
        if key not in seen:
            seen[key] = Installed(name=key, version=dist.version.strip(), local=_is_local(dist))
    return sorted(seen.values(), key=lambda d: d.name)


def fetch_project(name: str, timeout: float) -> dict[str, Any]:
    """The project JSON for ``name``; raises ``NotOnPyPI`` or ``FetchError``."""
    url = PYPI_PROJECT_URL.format(name=name)
    request = urllib.request.Request(
        url, headers={"User-Agent": USER_AGENT, "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NotOnPyPI(name) from exc
        raise FetchError(f"HTTP {exc.code} {exc.reason} from {url}") from exc
    except urllib.error.URLError as exc:
        raise FetchError(f"cannot reach {url}: {exc.reason}") from exc
    except TimeoutError as exc:
        raise FetchError(f"no answer from {url} within {timeout:g} s") from exc
    except OSError as exc:
        raise FetchError(f"network error reading {url}: {exc}") from exc
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FetchError(f"{url} did not answer JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise FetchError(f"{url} answered JSON that is not an object")
    return payload


def _first_line(text: object) -> str:
    if not isinstance(text, str):
        return ""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(v) for v in value]


def parse_advisory(raw: dict[str, Any]) -> Advisory:
    summary = _first_line(raw.get("summary")) or _first_line(raw.get("details"))
    withdrawn = raw.get("withdrawn")
    return Advisory(
        id=str(raw.get("id") or "?"),
        aliases=_str_list(raw.get("aliases")),
        summary=summary,
        fixed_in=_str_list(raw.get("fixed_in")),
        link=str(raw.get("link") or ""),
        withdrawn=str(withdrawn) if withdrawn else None,
    )


def classify(dist: Installed, payload: dict[str, Any]) -> Result:
    """Decide, from the project JSON, what is known about the installed version."""
    info = payload.get("info")
    latest = info.get("version") if isinstance(info, dict) else None
    raw_vulns = payload.get("vulnerabilities")
    if not isinstance(latest, str) or not isinstance(raw_vulns, list):
        return Result(
            dist.name,
            dist.version,
            ERROR,
            detail="project JSON lacks info.version or the vulnerabilities list",
        )
    latest = latest.strip()
    advisories = [parse_advisory(v) for v in raw_vulns if isinstance(v, dict)]
    active = [a for a in advisories if a.withdrawn is None]
    withdrawn = [a for a in advisories if a.withdrawn is not None]
    if dist.version != latest:
        return Result(
            dist.name,
            dist.version,
            UNVERIFIED,
            latest=latest,
            detail=f"not verifiable here: installed {dist.version}, latest {latest}",
            latest_release_advisories=active,
        )
    if active:
        ids = ", ".join(a.id for a in active)
        return Result(
            dist.name,
            dist.version,
            VULNERABLE,
            latest=latest,
            detail=f"{len(active)} advisory(ies) for the installed version: {ids}",
            findings=active,
            withdrawn=withdrawn,
        )
    return Result(
        dist.name,
        dist.version,
        CLEAN,
        latest=latest,
        detail="no known vulnerability for the installed version",
        withdrawn=withdrawn,
    )


def audit_one(dist: Installed, timeout: float) -> Result:
    if dist.local:
        return Result(
            dist.name,
            dist.version,
            LOCAL,
            detail="installed from a directory or URL, not from PyPI: not checked",
        )
    try:
        payload = fetch_project(dist.name, timeout)
    except NotOnPyPI:
        return Result(
            dist.name, dist.version, NOT_ON_PYPI, detail="PyPI answered 404: no such project"
        )
    except FetchError as exc:
        return Result(dist.name, dist.version, ERROR, detail=str(exc))
    return classify(dist, payload)


def audit(dists: list[Installed], timeout: float, jobs: int) -> list[Result]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda d: audit_one(d, timeout), dists))


def summarise(results: list[Result]) -> dict[str, int]:
    counts = {s: 0 for s in (VULNERABLE, CLEAN, UNVERIFIED, NOT_ON_PYPI, LOCAL, ERROR)}
    for r in results:
        counts[r.status] += 1
    counts["checked"] = len(results)
    counts["findings"] = sum(len(r.findings) for r in results)
    return counts


def exit_code(results: list[Result], strict: bool) -> int:
    if any(r.status == VULNERABLE for r in results):
        return 1
    if strict and any(r.status in NOT_VERIFIED for r in results):
        return 2
    return 0


def _advisory_line(a: Advisory) -> str:
    aliases = f" ({', '.join(a.aliases)})" if a.aliases else ""
    fixed = ", ".join(a.fixed_in) if a.fixed_in else "no fixed version listed"
    return f"{a.id}{aliases}: {a.summary or '(no summary)'} [fixed in: {fixed}]"


def render_table(results: list[Result]) -> str:
    headers = ("package", "installed", "latest", "status", "detail")
    rows = [(r.name, r.installed, r.latest or "-", r.status, r.detail) for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers[:-1])]
    lines = []
    fmt_row = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt_row.format(*headers))
    lines.append(fmt_row.format(*("-" * w for w in widths), "-" * len(headers[-1])))
    lines.extend(fmt_row.format(*row) for row in rows)

    findings = [r for r in results if r.findings]
    lines.append("")
    lines.append("Findings for installed versions:")
    if findings:
        for r in findings:
            for a in r.findings:
                lines.append(f"  {r.name} {r.installed}: {_advisory_line(a)}")
    else:
        lines.append("  none")

    reference = [r for r in results if r.latest_release_advisories]
    if reference:
        lines.append("")
        lines.append(
            "Advisories listed for the LATEST release of packages whose installed version "
            "differs (they say nothing about the installed version):"
        )
        for r in reference:
            for a in r.latest_release_advisories:
                where = f"{r.name} {r.latest} (installed {r.installed})"
                lines.append(f"  {where}: {_advisory_line(a)}")

    counts = summarise(results)
    lines.append("")
    lines.append(
        f"{counts['checked']} distributions: {counts[CLEAN]} clean, "
        f"{counts[VULNERABLE]} vulnerable ({counts['findings']} findings), "
        f"{counts[UNVERIFIED]} unverified (installed != latest), "
        f"{counts[NOT_ON_PYPI]} not on PyPI, {counts[LOCAL]} local, {counts[ERROR]} errors"
    )
    return "\n".join(lines)


def to_json(results: list[Result]) -> dict[str, Any]:
    return {
        "source": PYPI_PROJECT_URL,
        "summary": summarise(results),
        "results": [asdict(r) for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--path",
        help="a site-packages directory to audit (default: the running interpreter's)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="NAME",
        help="a distribution to leave out (repeatable), e.g. the project itself",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the report as JSON to FILE ('-' for standard output, table omitted)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 2 when some distribution could not be verified",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--jobs", type=int, default=8, help="concurrent requests")
    args = parser.parse_args(argv)

    skip = {canonical_name(s) for s in args.skip}
    dists = [d for d in installed_distributions(args.path) if d.name not in skip]
    if not dists:
        print("no installed distributions found", file=sys.stderr)
        return 2 if args.strict else 0
    results = audit(dists, timeout=args.timeout, jobs=args.jobs)

    report = json.dumps(to_json(results), indent=2)
    if args.json == "-":
        print(report)
    else:
        print(render_table(results))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(report + "\n")
    return exit_code(results, args.strict)


if __name__ == "__main__":
    sys.exit(main())
