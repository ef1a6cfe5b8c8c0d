"""Service bodies: health, and the one shape every error has."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .base import (
    with_examples,
)

__all__ = [
    "HealthOut",
    "Problem",
    "ProblemField",
    "ReadyOut",
]


class HealthOut(BaseModel):
    model_config = with_examples({"status": "ok", "degraded": False})

    status: Literal["ok"]
    degraded: bool = Field(description="The durable tier failed recently (serving degraded).")
    cache_degraded: bool = Field(
        default=False,
        description=(
            "The hot tier (Redis) failed recently: turns fail with 503 cache_unavailable. "
            "Only present (true) while it is so; the durable tier's state is `degraded`."
        ),
    )


class ReadyOut(BaseModel):
    model_config = with_examples(
        {"status": "ready", "store": "ok", "cache": "ok"},
        {
            "status": "not_ready",
            "store": "the store gave no answer within 1 s",
            "cache": "ok",
        },
    )

    status: Literal["ready", "not_ready"]
    store: str = Field(description="'ok', or why the durable tier did not answer.")
    cache: str = Field(description="'ok', or why the hot tier did not answer.")


class ProblemField(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """Every error has this shape. ``field`` names the offending input when one is to blame."""

    model_config = with_examples(
        {
            "code": "invalid_input",
            "detail": "user_id: String should have at least 1 character",
            "field": "user_id",
            "errors": [{"field": "user_id", "message": "String should have at least 1 character"}],
        }
    )

    code: str = Field(description="A stable machine-readable name of the error.")
    detail: str = Field(description="What went wrong, for a person.")
    field: str | None = None
    errors: list[ProblemField] = []
