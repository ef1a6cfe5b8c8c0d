"""The crash writer's operations and a model of what they leave in the durable tier.

Operation ``i`` is a pure function of ``(seed, i)``, so the test replays exactly what the
writer did. The writer runs one operation at a time, so when it is killed at most one
operation is in flight: the one after the last acknowledged.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

G, H, P = "g", "h", "p"  # H is in category mode (configured before the first round)
CHANNELS = 4
CATEGORIES = ("Mood", "Plans")

Key = tuple[str, str, str, str | None]


def op_for(seed: int, i: int) -> dict[str, Any]:
    rng = random.Random(seed * 1_000_003 + i)
    j = rng.randrange(CHANNELS)
    kind = rng.choices(
        ["tool_g", "tool_h", "capture", "server", "user", "clear_channel", "clear_user",
         "clear_server_channel"],
        weights=[30, 15, 25, 10, 8, 4, 4, 4],
    )[0]  # fmt: skip
    op: dict[str, Any] = {"i": i, "op": kind, "j": j}
    if kind == "tool_h":
        fields = rng.choice([("mood",), ("plans",), ("mood", "plans")])
        op["args"] = {f: f"{f}-{i}" for f in fields}
        if len(fields) == 2 and rng.random() < 0.4:
            op["args"][fields[0]] = ""  # erases the field (allowed beside new text for another)
    elif kind == "server":
        op["server"] = rng.choice([G, "s0", "s1", "s2"])
        op["cadence"] = 1 + i % 100
    elif kind == "user":
        op["user"] = f"q{j}"
        op["privacy"] = rng.choice(["none", "partial", "full"])
        op["opt_in"] = rng.random() < 0.5
    elif kind == "clear_channel":
        op["channel"] = rng.choice([f"c{j}", f"d{j}"])
    return op


@dataclass
class Row:
    summary: str | None = None
    categories: dict[str, str] = field(default_factory=dict)
    turns: int = 0

    def as_tuple(self) -> tuple[str | None, str, int]:
        return (self.summary, json.dumps(self.categories, sort_keys=True), self.turns)


@dataclass
class State:
    """The durable state the acknowledged operations leave behind."""

    rows: dict[Key, Row] = field(default_factory=dict)
    servers: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    users: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def copy(self) -> State:
        rows = {k: Row(r.summary, dict(r.categories), r.turns) for k, r in self.rows.items()}
        return State(rows, dict(self.servers), dict(self.users))

    def snapshot(self) -> tuple[Any, ...]:
        return (
            sorted((k, r.as_tuple()) for k, r in self.rows.items()),
            sorted(self.servers.items()),
            sorted(self.users.items()),
        )

    def apply(self, op: dict[str, Any]) -> None:
        j, kind = op["j"], op["op"]
        if kind in ("tool_g", "tool_h", "capture"):
            server, channel = (G, f"c{j}") if kind != "tool_h" else (H, f"d{j}")
            user_row = self.rows.setdefault(("user", f"u{j}", channel, P), Row())
            server_row = self.rows.setdefault(("server", server, channel, P), Row())
            if kind == "capture":
                server_row.turns += 1
                return
            for row in (user_row, server_row):
                if kind == "tool_g":
                    row.summary = f"v{op['i']}"
                else:
                    for name, value in op["args"].items():
                        if value:
                            row.categories[name] = value
                        else:
                            row.categories.pop(name, None)
            server_row.turns = 0
        elif kind == "server":
            self.servers[op["server"]] = (op["cadence"], f"nudge {op['i']}")
        elif kind == "user":
            self.users[op["user"]] = (op["privacy"], op["opt_in"])
        elif kind == "clear_channel":
            self.rows = {k: r for k, r in self.rows.items() if k[2] != op["channel"]}
        elif kind == "clear_user":
            self.rows = {
                k: r for k, r in self.rows.items() if not (k[0] == "user" and k[1] == f"u{j}")
            }
        elif kind == "clear_server_channel":
            self.rows.pop(("server", G, f"c{j}", P), None)
        else:  # pragma: no cover - an operation added to op_for without a model
            raise AssertionError(kind)
