"""OpenAI's wire format for an answer: the chat completion, the same as server-sent events
when streamed, and the error body. Only the shape, nothing of what the answer says."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def _words(texts: Sequence[str]) -> int:
    return sum(len(text.split()) for text in texts)


def completion(
    body: Mapping[str, Any], model: str, message: dict[str, Any], finish: str
) -> dict[str, Any]:
    """``message`` as the chat completion answering ``body``: an id derived from the request
    and no clock, so the same request gets the same answer; usage counted in words."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    sent = [str(m.get("content") or "") for m in body["messages"] if isinstance(m, Mapping)]
    answer = message.get("content") or json.dumps(message.get("tool_calls"))
    prompt_tokens, completion_tokens = _words(sent), _words([answer])
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": 0,  # deterministic: the same request gets the same answer
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(answer: Mapping[str, Any], *, usage: bool = False) -> str:
    """``answer`` (from :func:`complete`) as the server-sent events of a streamed completion."""
    choice = answer["choices"][0]
    head = {k: answer[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    delta = dict(choice["message"])
    if delta.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    events = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n" for chunk in chunks]
    return "".join(events) + "data: [DONE]\n\n"


def streamed(body: object) -> tuple[bool, bool]:
    """Whether a (valid) request asked for a stream, and for the usage chunk in it."""
    if not isinstance(body, Mapping) or body.get("stream") is not True:
        return False, False
    options = body.get("stream_options") or {}
    return True, options.get("include_usage") is True


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
