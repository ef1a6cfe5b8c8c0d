"""``shortterm bench``: every in-process benchmark in one run, as markdown, JSON and a plot."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .chatday import ChatDayResult, render_chatday, run_chatday
from .core import render_core, run_core
from .peers import render_peers, run_peers
from .report import machine, replace_section

__all__ = ["BenchOptions", "run_bench"]

SECTION = "Chat-day (shortterm bench)"


class BenchOptions:
    def __init__(
        self,
        *,
        entries: list[int],
        ops: int,
        hydrate: list[int],
        turns: int,
        memory_entries: int,
        peers: bool,
        command: str,
    ) -> None:
        self.entries, self.ops, self.hydrate, self.turns = entries, ops, hydrate, turns
        self.memory_entries, self.peers, self.command = memory_entries, peers, command


async def _run(opts: BenchOptions) -> tuple[str, dict[str, Any], list[ChatDayResult], Any]:
    with tempfile.TemporaryDirectory() as tmp:
        chatday = [await run_chatday(opts.turns, 0, Path(tmp))]
        big = max(opts.entries)
        if big > 0:
            chatday.append(await run_chatday(max(opts.turns // 4, 1000), big, Path(tmp)))
        core = await run_core(opts.entries, opts.ops, opts.hydrate)
        memory = _memory_in_fresh_process(opts.memory_entries)
        peers = await run_peers(min(opts.turns, 20_000), Path(tmp)) if opts.peers else None
    parts = [
        f"Machine: {machine()}. Command: `{opts.command}`. Medians and p99 in µs per operation; "
        "each ratio compares medians with its floor, measured in the same run (see "
        "`src/shortterm/bench/`). The machine is shared and noisy: trust ratios over absolute "
        "times.",
        "",
        "### Full turns",
        "",
        f"{opts.turns:,} chat-day turns on the embedded default (SQLite + in-process), and "
        f"{chatday[-1].turns:,} more with the hot tier grown to {chatday[-1].live_entries:,} "
        "entries first. An upgrade (a ~1,000-character summary through `turn.call_tool`, durable "
        "before it reports success) runs every 5th turn of a channel.",
        "",
        render_chatday(chatday),
        "",
        "### Operations against the floor, by hot-tier size",
        "",
        render_core(core, opts.command),
        "",
        "### Memory per live entry",
        "",
        f"{int(memory['entries']):,} entries of 10 unique 300-character messages each: "
        f"{memory['rss_bytes_per_entry']:,.0f} resident bytes per entry for "
        f"{memory['raw_bytes_per_entry']:,.0f} bytes of message text "
        f"(**{memory['ratio']:.2f}×** the raw size; the tier's own estimate, used for "
        f"`max_bytes`, is {memory['tier_estimate_per_entry']:,.0f}).",
    ]
    if peers is not None:
        ours = chatday[0].timings["context"].median_us + chatday[0].timings["capture"].median_us
        parts += ["", "### Peers", "", render_peers(peers, ours)]
    payload = {
        "machine": machine(),
        "command": opts.command,
        "chatday": [
            {
                **{k: v for k, v in asdict(r).items() if k != "timings"},
                "timings": {n: asdict(t) for n, t in r.timings.items()},
            }
            for r in chatday
        ],
        "core": {
            "sizes": {
                str(n): {k: asdict(t) for k, t in r.timings.items()}
                for n, r in core["sizes"].items()
            },
            "hydration_s": {str(n): v[0] for n, v in core["hydration"].items()},
            "peak_rss_mb": core["peak_rss_mb"],
        },
        "memory": memory,
        "peers": peers,
    }
    return "\n".join(parts), payload, chatday, core


def _memory_in_fresh_process(entries: int) -> dict[str, float]:
    """Resident memory is only meaningful in a process that has freed nothing yet."""
    code = (
        "import asyncio, json, sys; from shortterm.bench.core import measure_memory; "
        f"print(json.dumps(asyncio.run(measure_memory({int(entries)}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def _plot(core: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    sizes = sorted(core["sizes"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in (
        "capture (hot tier, memory:// store)",
        "capture (hot tier + SQLite counter)",
        "get",
        "clear_channel",
        "clear_user",
        "floor capture",
        "floor get",
    ):
        ax.plot(
            sizes,
            [core["sizes"][n].timings[name].median_us for n in sizes],
            marker="o",
            label=name,
            linestyle="--" if name.startswith("floor") else "-",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live entries in the hot tier")
    ax.set_ylabel("median µs per operation")
    ax.set_title("shortterm: per-operation latency against live entries")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run_bench(
    opts: BenchOptions, *, output: Path | None, json_path: Path | None, plot: Path | None
) -> str:
    markdown, payload, _chatday, core = asyncio.run(_run(opts))
    if plot is not None and _plot(core, plot):
        markdown += f"\n\n![per-operation latency against live entries]({plot.name})"
    if output is not None:
        replace_section(output, SECTION, markdown)
    if json_path is not None:
        json_path.write_text(json.dumps(payload, indent=2, default=float), "utf-8")
    return markdown
