"""Profile the per-turn hot paths (capture, context) on the embedded default with pyinstrument.

    pip install -e '.[bench]'                        # pyinstrument is in the bench extra
    python benchmarks/profile_hot_paths.py            # writes docs/profiles/{capture,context}.txt

20,000 chat-day turns are captured (the capture profile), then the context of each is rendered
(the context profile). Sampling profiles: read the proportions, not the absolute times.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path

from pyinstrument import Profiler

from shortterm.bench.core import T0, Workload
from shortterm.cache.inprocess import InProcessCache
from shortterm.memory.facade import Memory
from shortterm.model.config import Config
from shortterm.store.sqlite import SQLiteStore

OUT = Path(__file__).resolve().parents[1] / "docs" / "profiles"


def _clean(text: str) -> str:
    # Keep the report about the project: no absolute paths of the machine it ran on.
    return re.sub(r"(?m)^Profile at .*$", "Profile of benchmarks/profile_hot_paths.py", text)


async def main(turns: int = 20_000) -> None:
    cfg = Config(sweep_interval_s=0)
    cache = InProcessCache(
        crude_ttl_s=cfg.crude_ttl_s,
        summary_ttl_s=cfg.summary_ttl_s,
        max_entries=cfg.max_entries,
        max_bytes=cfg.max_bytes,
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "profile.db")
        await store.migrate()
        memory = Memory(store=store, cache=cache, config=cfg, clock=lambda: T0)
        cache.set_complete(True)
        work = Workload()
        plan = [work.turn() for _ in range(turns)]
        capture = Profiler(interval=0.0001)
        for t in plan:
            history, reply = work.history(t["user_id"], T0), work.reply(t["persona_id"])
            turn = memory.turn(**t)
            capture.start()
            await turn.capture(history=history, replies=[reply])
            capture.stop()
        context = Profiler(interval=0.0001)
        for t in plan:
            turn = memory.turn(**t, user_message="what is the plan?", bot_name="Tomo")
            context.start()
            await turn.context()
            context.stop()
        await memory.close()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, profiler in (("capture", capture), ("context", context)):
        text = profiler.output_text(unicode=True, color=False)
        (OUT / f"{name}.txt").write_text(_clean(text), "utf-8")
        print(f"wrote docs/profiles/{name}.txt")


if __name__ == "__main__":
    asyncio.run(main())
