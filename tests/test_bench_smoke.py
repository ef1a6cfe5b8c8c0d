"""The benchmark command runs end to end (a smoke run; the figures themselves are not tested)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from shortterm.cli import main


def test_bench_quick_writes_markdown_and_json(tmp_path: Path) -> None:
    md, js = tmp_path / "bench.md", tmp_path / "bench.json"
    md.write_text("# Benchmarks\n\n## Other section\n\nkept\n")
    result = CliRunner().invoke(
        main, ["bench", "--quick", "--no-peers", "--output", str(md), "--json", str(js)]
    )
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert "## Other section\n\nkept" in text
    assert "## Chat-day (shortterm bench)" in text
    for op in ("context", "capture", "upgrade"):
        assert f"| {op} |" in text
    payload = json.loads(js.read_text())
    assert {r["live_entries"] for r in payload["chatday"]} == {0, 10_000}
    assert payload["memory"]["raw_bytes_per_entry"] == 2990
