"""Small helpers shared by the benchmarks: timing summaries and the markdown report."""

from __future__ import annotations

import platform
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Timing", "machine", "replace_section", "summarize"]


@dataclass(frozen=True, slots=True)
class Timing:
    name: str
    median_us: float
    p99_us: float
    ops: int

    def ratio(self, floor: Timing) -> float:
        return self.median_us / floor.median_us if floor.median_us else float("inf")


def summarize(name: str, samples_ns: list[int]) -> Timing:
    ordered = sorted(samples_ns)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return Timing(name, statistics.median(ordered) / 1000, p99 / 1000, len(ordered))


def machine() -> str:
    try:
        cpus = Path("/proc/cpuinfo").read_text().count("processor\t:")
        model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        cpu = model.group(1).strip() if model else platform.processor()
    except OSError:
        cpus, cpu = 0, platform.processor()
    return f"{cpu}, {cpus} cores, Python {platform.python_version()}, SQLite via stdlib"


def replace_section(path: Path, heading: str, body: str) -> None:
    """Write ``## heading`` + body into the markdown file, replacing that section only."""
    text = path.read_text("utf-8") if path.exists() else "# Benchmarks\n"
    section = f"## {heading}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n", "utf-8")


def publish(text: str, write: str | Path | None, heading: str) -> None:
    """Print a benchmark's figures, and with ``write`` put them in that markdown file's
    ``## heading`` section (the benchmarks' ``--write``)."""
    print(text)
    if write is not None:
        replace_section(Path(write), heading, text)
