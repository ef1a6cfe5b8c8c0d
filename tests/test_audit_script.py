"""scripts/audit_dependencies.py decides from recorded project JSON; no test touches the network.

The payloads are written by hand in the shape of PyPI's ``/pypi/<name>/json``: ``info.version``
is the latest release and ``vulnerabilities`` is computed for that release only.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "audit_dependencies.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_dependencies", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


audit = _load()

ADVISORY = {
    "id": "GHSA-aaaa-bbbb-cccc",
    "aliases": ["CVE-2026-0001", "PYSEC-2026-1"],
    "summary": None,
    "details": "\nHeader smuggling in the parser.\n\nLonger explanation follows.",
    "fixed_in": ["1.4.2"],
    "link": "https://osv.dev/vulnerability/GHSA-aaaa-bbbb-cccc",
    "source": "osv",
    "withdrawn": None,
}
WITHDRAWN = {**ADVISORY, "id": "GHSA-wwww-wwww-wwww", "withdrawn": "2026-05-01T00:00:00Z"}


def payload(latest: str, *vulns: dict[str, Any]) -> dict[str, Any]:
    return {"info": {"name": "demo", "version": latest}, "vulnerabilities": list(vulns)}


def test_same_version_with_advisory_is_a_finding() -> None:
    result = audit.classify(audit.Installed("demo", "1.4.1"), payload("1.4.1", ADVISORY))
    assert result.status == "vulnerable"
    [finding] = result.findings
    assert finding.id == "GHSA-aaaa-bbbb-cccc"
    assert finding.aliases == ["CVE-2026-0001", "PYSEC-2026-1"]
    assert finding.summary == "Header smuggling in the parser."  # details' first line
    assert finding.fixed_in == ["1.4.2"]
    assert audit.exit_code([result], strict=False) == 1


def test_same_version_without_advisory_is_clean() -> None:
    result = audit.classify(audit.Installed("demo", "2.0"), payload("2.0"))
    assert result.status == "clean"
    assert audit.exit_code([result], strict=True) == 0


def test_other_version_is_unverified_and_latest_advisories_stay_apart() -> None:
    result = audit.classify(audit.Installed("demo", "1.0"), payload("1.4.1", ADVISORY))
    assert result.status == "unverified"
    assert result.findings == []
    assert [a.id for a in result.latest_release_advisories] == ["GHSA-aaaa-bbbb-cccc"]
    assert "installed 1.0, latest 1.4.1" in result.detail
    assert audit.exit_code([result], strict=False) == 0
    assert audit.exit_code([result], strict=True) == 2
    table = audit.render_table([result])
    assert "Findings for installed versions:\n  none" in table
    assert "say nothing about the installed version" in table


def test_versions_are_compared_exactly() -> None:
    # "1.0" and "1.0.0" may be the same release, but the script will not assume so.
    result = audit.classify(audit.Installed("demo", "1.0"), payload("1.0.0"))
    assert result.status == "unverified"


def test_withdrawn_advisory_is_not_a_finding() -> None:
    result = audit.classify(audit.Installed("demo", "3.1"), payload("3.1", WITHDRAWN))
    assert result.status == "clean"
    assert [a.id for a in result.withdrawn] == ["GHSA-wwww-wwww-wwww"]


def test_payload_without_vulnerabilities_key_is_an_error_not_clean() -> None:
    result = audit.classify(audit.Installed("demo", "1.0"), {"info": {"version": "1.0"}})
    assert result.status == "error"
    assert audit.exit_code([result], strict=True) == 2


def test_canonical_name() -> None:
    assert audit.canonical_name("discord.py") == "discord-py"
    assert audit.canonical_name("Typing_Extensions") == "typing-extensions"


def test_fetch_errors_become_results(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_found(*_: object, **__: object) -> None:
        raise urllib.error.HTTPError("u", 404, "Not Found", {}, io.BytesIO())  # type: ignore[arg-type]

    monkeypatch.setattr(urllib.request, "urlopen", not_found)
    assert audit.audit_one(audit.Installed("demo", "1.0"), 1.0).status == "not-on-pypi"

    def unreachable(*_: object, **__: object) -> None:
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    result = audit.audit_one(audit.Installed("demo", "1.0"), 1.0)
    assert result.status == "error"
    assert "Name or service not known" in result.detail


def test_local_install_is_not_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object, **__: object) -> None:
        raise AssertionError("a local install must not be looked up on PyPI")

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    result = audit.audit_one(audit.Installed("shortterm", "0.1.0", local=True), 1.0)
    assert result.status == "local"
