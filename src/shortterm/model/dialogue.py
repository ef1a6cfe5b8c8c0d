"""Whose a message of a dialogue is: its author's, or, for the bot's message, the user's it
answers. A purge takes both from every list of messages it scrubs (the hot tiers' scrub and a
capture in flight when the purge lands; ``cache/redis/lua/capture.lua`` applies the same rule).

The rule is the one a capture uses to give a user's own scope only the bot's answers to them
(docs/design.md, "Scopes"): a bot message answers the nearest user message before it; one
before any user message answers no one. It is decided on the list as it is, before anything
is dropped: dropping a user's messages first would hand the bot's answers to them to whoever
spoke before. Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .messages import Message

__all__ = ["addressees", "without_authors"]


def addressees(messages: Sequence[Message]) -> list[str | None]:
    """For each message, the user it belongs to: a user message its author, a bot message
    the author of the nearest user message before it (``None``: that message has no author,
    or there is none)."""
    out: list[str | None] = []
    answering: str | None = None  # before any user message, a bot message answers no one
    for m in messages:
        if m.role == "user":
            answering = m.author_id
        out.append(answering)
    return out


def without_authors(messages: tuple[Message, ...], authors: Collection[str]) -> tuple[Message, ...]:
    """``messages`` without those ``authors`` wrote and the bot's messages that answer one of
    them (:func:`addressees`); answers to anyone else stay. The same tuple when nothing goes."""
    if not authors:
        return messages
    kept = [
        m
        for m, owner in zip(messages, addressees(messages), strict=True)
        if owner not in authors and m.author_id not in authors
    ]
    return messages if len(kept) == len(messages) else tuple(kept)
