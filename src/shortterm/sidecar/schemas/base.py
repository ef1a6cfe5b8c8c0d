"""What every body model is made of: the strict field types and the strict base model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from ...model import MAX_ID_CHARS

__all__ = [
    "ID_PATTERN",
    "WHOLE",
    "Epoch",
    "Format",
    "Id",
    "MessagesFormat",
    "Name",
    "NonBlank",
    "PrivacyName",
    "StrictBool",
    "StrictModel",
    "Text",
    "Tokens",
    "with_examples",
]

ID_PATTERN = r"^[^\x00]+$"
Id = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN),
]
Text = Annotated[str, StringConstraints(strict=True)]
Name = Annotated[str, StringConstraints(strict=True, max_length=1000)]
NonBlank = Annotated[str, StringConstraints(strict=True, pattern=r"\S")]


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


def with_examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})
