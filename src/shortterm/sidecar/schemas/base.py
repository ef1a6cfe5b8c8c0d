"""What every body model is made of: the strict field types and the strict base model.

Lone surrogates are handled here, by type. Python's JSON decoder turns a ``"\\ud800"`` escape
(valid JSON) into a string that no UTF-8 encoder accepts, so a body could carry one into an
answer and make the answer itself fail. Text (:data:`Text`, :data:`Name`, :data:`NonBlank`,
:data:`JSONObject`, the keys of every body) gets U+FFFD in its place, as the library stores
it. An :data:`Id` with one is refused, as ``shortterm``'s id check refuses it: replaced, the
ids ``"\\ud800"`` and ``"\\udc00"`` would both become ``"\\ufffd"`` and name the same
memory. That difference is why this is done by type and not once for the whole body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ...model import MAX_ID_CHARS
from ...model.text import replace_surrogates

__all__ = [
    "ID_PATTERN",
    "WHOLE",
    "Epoch",
    "Format",
    "Id",
    "JSONObject",
    "MessagesFormat",
    "Name",
    "NonBlank",
    "PrivacyName",
    "StrictBool",
    "StrictModel",
    "Text",
    "Tokens",
    "valid_json",
    "with_examples",
]


def valid_json(value: Any) -> Any:
    """``value`` (decoded JSON) with lone surrogates replaced in every string, keys included."""
    kind = type(value)
    if kind is str:
        return replace_surrogates(value)
    if kind is dict:
        return {valid_json(k): valid_json(v) for k, v in value.items()}
    if kind is list:
        return [valid_json(v) for v in value]
    return value


def _text(value: object) -> object:
    # Not a string: left to the strict type to refuse.
    return replace_surrogates(value) if type(value) is str else value


def _id(value: object) -> object:
    if type(value) is str and not value.isascii() and replace_surrogates(value) != value:
        raise PydanticCustomError("id_unicode", "ids must be valid Unicode (no lone surrogates)")
    return value


# The validators come last, so they run before the constraints (which cannot read a string
# with a lone surrogate at all).
ID_PATTERN = r"^[^\x00]+$"
Id = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN),
    BeforeValidator(_id),
]
Text = Annotated[str, StringConstraints(strict=True), BeforeValidator(_text)]
Name = Annotated[str, StringConstraints(strict=True, max_length=1000), BeforeValidator(_text)]
NonBlank = Annotated[str, StringConstraints(strict=True, pattern=r"\S"), BeforeValidator(_text)]
# A JSON object passed on as it is (a provider's message, a tool call's arguments).
JSONObject = Annotated[dict[str, Any], BeforeValidator(valid_json)]


def _whole(value: object) -> object:
    # JSON has one number type, and JSON Schema calls 5.0 an integer: take it as 5.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Integers in bounds; 5.0 counts, a JSON string or boolean does not. (Put it after the bounds,
# so the document shows them as minimum and maximum.)
WHOLE = BeforeValidator(_whole)
Tokens = Annotated[int, Field(strict=True, ge=1, le=1_000_000), WHOLE]

StrictBool = Annotated[bool, Field(strict=True)]
PrivacyName = Literal["none", "partial", "full"]
Format = Literal["openai", "openai-responses", "anthropic", "gemini", "mcp"]
MessagesFormat = Literal["openai", "openai-responses", "anthropic", "gemini"]
Epoch = Annotated[float, Field(strict=True, ge=0, lt=1e11)]


class StrictModel(BaseModel):
    """The base of request bodies: unknown fields are refused, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_keys(cls, data: Any) -> Any:
        # An unknown key is refused by name; with a lone surrogate it could not be named.
        if type(data) is dict and not all(type(k) is str and k.isascii() for k in data):
            return {replace_surrogates(k) if type(k) is str else k: v for k, v in data.items()}
        return data


def with_examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})
