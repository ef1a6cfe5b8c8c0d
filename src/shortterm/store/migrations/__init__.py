"""Versioned SQL migrations, one folder per dialect: ``NNNN_name.sql``, applied in order.

A file's number is its version; each file is applied in one transaction together with the
``schema_migrations`` row that records it, so a crash leaves either all of it or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "load"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]

    @property
    def label(self) -> str:
        """The file's name without ``.sql``: ``0001_initial``."""
        return f"{self.version:04d}_{self.name}"


def _split(script: str) -> tuple[str, ...]:
    """Split on semicolons that end a line; our migrations hold no procedural bodies."""
    lines = [ln for ln in script.splitlines() if not ln.lstrip().startswith("--")]
    parts = "\n".join(lines).split(";\n")
    return tuple(p.strip().rstrip(";") for p in parts if p.strip())


def load(dialect: str) -> list[Migration]:
    folder = resources.files(__package__).joinpath(dialect)
    out = []
    for item in folder.iterdir():
        if not item.name.endswith(".sql"):
            continue
        number, _, rest = item.name.partition("_")
        statements = _split(item.read_text("utf-8"))
        out.append(Migration(int(number), rest.removesuffix(".sql"), statements))
    out.sort(key=lambda m: m.version)
    if [m.version for m in out] != list(range(1, len(out) + 1)):
        found = [m.version for m in out]
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {found}")
    return out
