"""The openai example against a scripted OpenAI-compatible server on loopback.

The server speaks the real chat-completions wire format: the first answer is a ``tool_calls``
message calling ``update_short_term_memory``, the second is plain text. The summary must be on
disk afterwards (checked by reopening the SQLite file).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import shortterm
from shortterm.tool import texts
from tests.fake_model_process import FakeModelProcess, fake_model_process

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "openai_tool_loop.py"
SUMMARY = "Ana and Tomo planned a Saturday hike on the ridge trail, leaving at 8."


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openai_tool_loop", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def tool_call(arguments: str) -> dict[str, Any]:
    return completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "update_short_term_memory", "arguments": arguments},
                }
            ],
        },
        "tool_calls",
    )


def text(content: str) -> dict[str, Any]:
    return completion({"role": "assistant", "content": content}, "stop")


class ScriptedModel:
    """An OpenAI-compatible /v1/chat/completions that plays back canned answers."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions" or not model.answers:
                    self.send_error(404)
                    return
                model.requests.append(body)
                payload = json.dumps(model.answers.pop(0)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def example() -> ModuleType:
    return load_example()


async def test_a_full_tool_loop_lands_the_summary_on_disk(
    example: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "bot.db"
    answers = [tool_call(json.dumps({"summary": SUMMARY})), text("Saturday at 8, see you there!")]
    with ScriptedModel(answers) as model:
        reply = await example.main(
            base_url=model.base_url,
            model="scripted",
            user_message="so, Saturday hike on the ridge trail at 8?",
            store=f"sqlite:///{db}",
        )
    assert reply == "Saturday at 8, see you there!"
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["update_short_term_memory"]
    assert first["messages"][-1]["content"].endswith("Saturday hike on the ridge trail at 8?")
    assert "tools" not in second  # one upgrade per turn: the tool is gone after it
    tool_message = second["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "call_1", "content": texts.OK}
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"

    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT kind, summary FROM scopes").fetchall())
    conn.close()
    assert rows == {"user": SUMMARY, "server": SUMMARY}
    async with shortterm.open(store=f"sqlite:///{db}") as memory:
        entry = await memory.get(shortterm.ScopeKey.server("333", "222"))
        assert entry is not None
        assert entry.summary == SUMMARY


async def test_the_next_turn_sees_the_summary(example: ModuleType, tmp_path: Path) -> None:
    db = tmp_path / "bot.db"
    answers = [tool_call(json.dumps({"summary": SUMMARY})), text("Noted."), text("At 8.")]
    with ScriptedModel(answers) as model:
        await example.main(
            base_url=model.base_url, model="m", user_message="hike at 8", store=f"sqlite:///{db}"
        )
        await example.main(
            base_url=model.base_url, model="m", user_message="when again?", store=f"sqlite:///{db}"
        )
    sent = model.requests[2]["messages"]
    notes = [i for i, m in enumerate(sent) if SUMMARY in (m.get("content") or "")]
    assert notes == [1]  # anchored right after the system prompt, before the dialogue
    assert sent[0]["role"] == "system"
    assert sent[-1]["content"].endswith("when again?")


async def test_a_refused_call_is_reported_to_the_model_and_nothing_is_written(
    example: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "bot.db"
    answers = [tool_call('{"summary": 42}'), text("Sure.")]
    with ScriptedModel(answers) as model:
        reply = await example.main(
            base_url=model.base_url, model="m", user_message="hi", store=f"sqlite:///{db}"
        )
    assert reply == "Sure."
    refusal = model.requests[1]["messages"][-1]
    assert refusal["role"] == "tool"
    assert "must be a string" in refusal["content"]
    assert "tools" in model.requests[1]  # nothing landed, so the tool is still offered
    with sqlite3.connect(db) as conn:
        summaries = conn.execute("SELECT summary FROM scopes").fetchall()
    conn.close()
    assert summaries
    assert all(s is None for (s,) in summaries)


def test_the_prompt_needs_only_the_turn(example: ModuleType) -> None:
    assert list(inspect.signature(example.assemble_prompt).parameters) == ["turn", "dialogue"]
    doc = " ".join(example.__doc__.split())
    assert "Raw messages live only in the hot tier" in doc and "only the summaries" in doc


def run_example(model: FakeModelProcess, store: str, said: str, *flags: str) -> str:
    """Run the example as a user would, in a process of its own; its stdout (the reply)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHORTTERM_")}
    proc = subprocess.run(
        [
            sys.executable, str(EXAMPLE), "--base-url", model.url, "--model", "shortterm-fake",
            "--store", store, *flags, said,
        ],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_offline_a_turn_then_another_channel_recalls_it(tmp_path: Path) -> None:
    """`shortterm fake-model` and the example, each a process of its own, as the docs say:
    a note taken in #plans is in the prompt of a turn in #general of the same server."""
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    said = "note that we hike the ridge trail on Saturday at 8"
    with fake_model_process(tmp_path / "prompts.jsonl") as model:
        first = run_example(model, store, said, "--channel-id", "plans")
        second = run_example(model, store, "ready?", "--channel-id", "general")
        sent = model.chats()
    assert first == f'Notes updated. You said: "Ana: {said}". My memory is empty here.'
    assert second == f'You said: "Ana: ready?". From memory: "Ana: {said}".'
    # #plans: the tool offered and called, then the answer; #general: one plain request.
    assert ["tools" in request for request in sent] == [True, False, True]
    blocks = [m["content"] for m in sent[-1]["messages"] if m["content"].startswith("⟦")]
    assert len(blocks) == 1
    assert "in this server · summary written" in blocks[0]
    assert f"│ Ana: {said}" in blocks[0].splitlines()


def test_the_flags_show_another_channel_recalled(
    tmp_path: Path, scale_urls: tuple[str, str]
) -> None:
    """Run as a user would, twice: #plans, then #general for the same user, on a shared cache."""
    _, cache = scale_urls
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    flags = ["--cache", cache, "--user-id", "u9", "--user-name", "Bo", "--server-id", "g9"]
    with fake_model_process(tmp_path / "prompts.jsonl") as model:
        run_example(model, store, "pack list for Saturday?", *flags, "--channel-id", "plans")
        reply = run_example(model, store, "ready?", *flags, "--channel-id", "general")
        sent = model.chats()
    assert reply.startswith('You said: "Bo: ready?". From memory: "Bo: pack list for Saturday?"')
    prompt = "\n".join(m.get("content") or "" for m in sent[-1]["messages"])
    assert "│ Bo: pack list for Saturday?" in prompt
    assert '│ Tomo: You said: "Bo: pack list for Saturday?".' in prompt
