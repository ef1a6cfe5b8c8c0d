"""Every sentence the tool shows a model: descriptions and refusals.

Kept in one place so they can be reviewed (and translated) together. Refusals say what
happened and what the model can do next, because the model reads them and nobody else does.
"""

from __future__ import annotations

TOOL_NAME = "update_short_term_memory"

TOOL_DESCRIPTION = (
    "Rewrite your working notes for the conversation in this channel, so that later turns "
    "here can pick up the thread without rereading everything. Use it when the talk has "
    "moved on and your notes are out of date. These notes are short-lived and replaced on "
    "every update. Do not use this tool when someone asks you to remember something for "
    "good or for future conversations: that belongs in long-term memory, if you have a tool "
    "for it."
)

SUMMARY_PROPERTY = (
    "The complete, updated notes: who is talking, what is going on, what was decided and what "
    "is still open, plus any detail the next few messages will need. They replace the "
    "previous notes entirely. Plain prose, at most {max_chars} characters."
)

SUMMARY_PARAMETERS = "The new working notes for this channel."

CATEGORY_PARAMETERS = (
    "Working notes for this channel, one field per topic. Send only the topics whose notes "
    "changed: a topic left out or set to null keeps its current note, and an empty string "
    "erases it. At least one topic needs new text. Each note holds at most {max_chars} "
    "characters."
)

# Used for the identity placeholders that may appear in an admin's descriptions.
SOMEONE = "the user"

OK = "Short-term memory updated. Nothing needs to be said about it in the reply."

# -- refusals: why the tool cannot be used on this turn --------------------------------------
UNKNOWN_TOOL = "There is no tool named {name!r} here; the memory tool is called {tool!r}."
PROVIDER = "Short-term memory updates are not available with this model provider."
NO_TOOLS = "Tools are switched off for this turn, so short-term memory cannot be updated."
DISABLED = "Short-term memory is switched off on this server; carry on without it."
LONG_TERM = (
    "The user asked for something to be remembered permanently, so short-term memory is not "
    "updated on this turn. Use long-term memory for that request if you have a tool for it."
)
PRIVACY = (
    "This user has asked not to be remembered, so short-term memory is not updated for this "
    "conversation."
)
ALREADY = (
    "Short-term memory was already updated on this turn; it can be updated again on a later "
    "turn. Carry on with the reply."
)
IN_FLIGHT = (
    "Another update of short-term memory is still being saved on this turn; send only one "
    "update per turn."
)

# -- refusals: what was wrong with the arguments ----------------------------------------------
TOO_LARGE = (
    "The arguments are too large ({size} characters; the limit is {limit}). Send a shorter update."
)
BAD_JSON = "The arguments are not valid JSON ({error}). Send a JSON object such as {example}."
NOT_OBJECT = "The arguments must be a JSON object such as {example}, not {kind}."
BAD_KEY = "Argument names must be strings; send a JSON object such as {example}."
UNKNOWN_FIELDS = "Unknown field(s): {unknown}. The fields of this tool are: {fields}."
SUMMARY_MISSING = 'Give the notes in the "summary" field, as a string.'
NOT_A_STRING = "The {field!r} field must be a string, not {kind}."
SUMMARY_BLANK = 'The "summary" field is empty; write the updated notes into it.'
EMPTY_AFTER_CLEANING = (
    "Nothing usable was left of the {field!r} field once control characters were removed; "
    "write it as plain text."
)
CATEGORIES_EMPTY = (
    "No topic got new text. Each update must write at least one of: {fields}. (An empty "
    "string erases a topic, but only alongside new text for another.)"
)
STORE_UNSURE = (
    "Short-term memory may or may not have been saved (storage failed while saving). Carry "
    "on with the reply; if it matters, update it again on a later turn."
)
OVERTAKEN = (
    "This memory was cleared while the update was being saved, so the update was not kept. "
    "Do not write it again unless the user asks."
)
STORE_DOWN = (
    "Short-term memory could not be saved right now (storage is unavailable); nothing was "
    "changed. Carry on with the reply; it can be tried again on a later turn."
)
