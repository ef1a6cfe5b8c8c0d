"""The three-line curl quickstart ``shortterm serve --quickstart`` prints (pure; tested by
running the exact lines against a live sidecar)."""

from __future__ import annotations

import json

__all__ = ["quickstart_lines"]

_TURN_ID = """python3 -c 'import json, sys; print(json.load(sys.stdin)["turn_id"])'"""
# Every recalled block, or a plain word when this turn recalls nothing (a fresh memory).
_CONTEXT = (
    "python3 -c 'import json, sys; "
    """items = json.load(sys.stdin)["context"]["items"]; """
    """print("\\n\\n".join(i["text"] for i in items) or "nothing recalled")'"""
)


def _body(value: object) -> str:
    return "'" + json.dumps(value, ensure_ascii=True) + "'"


def quickstart_lines(base_url: str = "http://127.0.0.1:8765", *, token: bool = False) -> list[str]:
    """Start a turn in #plans, capture it, then start a turn in #general whose context
    recalls #plans. With ``token``, each request sends ``$SHORTTERM_TOKEN``."""
    auth = ' -H "Authorization: Bearer $SHORTTERM_TOKEN"' if token else ""
    first = {"user_id": "111", "channel_id": "plans", "server_id": "333", "channel_name": "plans"}
    capture = {
        "history": [
            {"role": "user", "content": "Pack list for Saturday?", "author_id": "111",
             "speaker": "Ana"}
        ],
        "replies": [{"text": "Water, rain jacket, snacks.", "persona_name": "Tomo"}],
    }  # fmt: skip
    second = {"user_id": "111", "channel_id": "general", "server_id": "333", "bot_name": "Tomo"}
    return [
        f"TURN=$(curl -s{auth} --json {_body(first)} {base_url}/v1/turns | {_TURN_ID})",
        f"curl -s{auth} --json {_body(capture)} {base_url}/v1/turns/$TURN/capture",
        f"curl -s{auth} --json {_body(second)} {base_url}/v1/turns | {_CONTEXT}",
    ]
