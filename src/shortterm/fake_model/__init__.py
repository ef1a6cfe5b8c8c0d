"""``shortterm fake-model``: an OpenAI-compatible chat-completions server for trying things
offline.

It is not a language model. It answers deterministically from the request, so a bot can be run
end to end with no network and no key, and a test can assert on what it said:

- **A plain answer** echoes the last thing the user said and quotes the lines it finds in
  shortterm's memory blocks (every ``│ `` line of a ``⟦…⟧`` envelope, wherever it was spliced),
  so recall is visible in the reply itself.
- **A tool call**: when ``update_short_term_memory`` is in ``tools`` and the user's last message
  asks to remember something (``remember``, ``note that``, ``keep in mind``, ``memorise``), or a
  message names the tool (shortterm's nudge does), or ``tool_choice`` requires it, the answer is
  a call of that tool. Its arguments are built from the offered schema: the first string
  property (``summary``, or the first category) gets the user's recent lines, cut to the length
  the schema states; nullable properties get ``null`` ("unchanged"). (shortterm itself reads
  "please remember …" or "remember: …" as a request for *long-term* memory and does not offer
  the tool on that turn; "note that …" reaches it. The reply says when it was asked but the
  tool was not offered.)
- **After a tool result** it answers in text and says what the tool answered.
- **A distill request** (the system message of ``shortterm distill``): the notes are the
  quoted lines of its "latest messages" block, oldest first, joined with ``; `` after
  ``Notes:`` and cut to the stated limit; in category mode a JSON object whose first field
  holds them and whose other fields are ``null``.

``POST /v1/chat/completions`` and ``GET /v1/models``. With ``stream: true`` the same answer
comes as server-sent events: one chunk with the whole delta, one with the finish reason (and
one with the usage when ``stream_options.include_usage`` asks), then ``data: [DONE]``. Any
model name and any API key are accepted. Malformed requests get a 4xx in OpenAI's error shape
(``{"error": {"message", "type", "param", "code"}}``), never a 500.
:class:`RequestLog` appends each request, with the answer, to a JSON-lines file: that is how
a user sees the prompt shortterm built.

Needs the ``[sidecar]`` extra (Starlette and uvicorn); ``import shortterm`` never loads this.

The package, in the order a request becomes an answer: :mod:`.request` checks the request and
reads the prompt from it, :mod:`.answer` decides and writes the answer, :mod:`.wire` shapes it
as OpenAI's completion, stream or error, and :mod:`.server` serves it over HTTP.
"""

from __future__ import annotations

from .answer import complete
from .request import BadRequest
from .server import DEFAULT_PORT, MODEL_ID, RequestLog, bind, create_app, run
from .wire import stream_events

__all__ = [
    "DEFAULT_PORT",
    "MODEL_ID",
    "BadRequest",
    "RequestLog",
    "bind",
    "complete",
    "create_app",
    "run",
    "stream_events",
]
