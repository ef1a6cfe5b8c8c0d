"""The public surface: __all__ is complete, imports stay light, the demo and CLI run."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

from click.testing import CliRunner

import shortterm
from shortterm.cli import main


def test_all_names_are_exported_and_exist() -> None:
    public = {n for n in dir(shortterm) if not n.startswith("_")}
    # Submodules are reachable as attributes once imported; they are not API names.
    modules = {n for n in public if isinstance(getattr(shortterm, n), types.ModuleType)}
    assert set(shortterm.__all__) - {"__version__"} <= public
    missing = public - set(shortterm.__all__) - modules
    assert not missing, f"public names missing from __all__: {sorted(missing)}"


def test_error_tree() -> None:
    assert issubclass(shortterm.InvalidInput, shortterm.ShortTermError)
    assert issubclass(shortterm.InvalidInput, ValueError)
    for cls in (shortterm.ConfigError, shortterm.StoreUnavailable, shortterm.ExtraMissing):
        assert issubclass(cls, shortterm.ShortTermError)
    assert issubclass(shortterm.ExtraMissing, ImportError)
    assert "pip install -e '.[redis]'" in str(shortterm.ExtraMissing("redis", "redis"))


def test_import_is_light() -> None:
    code = (
        "import sys, shortterm; heavy = {'pydantic', 'rich', 'click', 'psycopg', 'redis'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner().invoke(main, ["demo", "--store", url])
    assert result.exit_code == 0, result.output
    assert "summary upgrade" in result.output
    assert "Remembered after the restart" in result.output
    assert "hydrated 2 row(s)" in result.output
    assert "summary kept: 'Hike on Saturday" in result.output


def test_demo_reports_a_bad_url() -> None:
    result = CliRunner().invoke(main, ["demo", "--store", "nonsense"])
    assert result.exit_code == 2
    assert "not a URL" in result.output
