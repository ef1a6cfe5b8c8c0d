"""The path and query parameters the routes share: their bounds, descriptions and examples."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from ..memory.admin import MAX_SERVERS_PAGE
from ..model import MAX_ID_CHARS
from .schemas import ID_PATTERN

_ID = {"min_length": 1, "max_length": MAX_ID_CHARS, "pattern": ID_PATTERN}
# The alias is the parameter's name in the API: an endpoint written once for both owner kinds
# (owner_routes.py) names its parameter owner_id, and the document and the error locations
# still say server_id or user_id.
ServerId = Annotated[
    str, Path(alias="server_id", description="A server (guild) id.", examples=["333"], **_ID)
]
UserId = Annotated[str, Path(alias="user_id", description="A user id.", examples=["111"], **_ID)]
ChannelId = Annotated[str, Path(description="A channel id.", examples=["222"], **_ID)]
TurnId = Annotated[
    str, Path(description="The id a turn start returned.", min_length=1, max_length=256)
]
PersonaQuery = Annotated[
    str | None,
    Query(description="The persona; omit it for the entry without one.", examples=["7"], **_ID),
]
PersonaFilter = Annotated[
    str | None, Query(description="Only this persona's entries.", examples=["7"], **_ID)
]
ChannelFilter = Annotated[
    str | None, Query(description="Only this channel's entries.", examples=["222"], **_ID)
]
AfterServer = Annotated[
    str | None,
    Query(
        description="Only servers whose id sorts after this one: the `next_after` of the "
        "previous page. Omit it for the first page.",
        examples=["333"],
        **_ID,
    ),
]
PageLimit = Annotated[
    int, Query(ge=1, le=MAX_SERVERS_PAGE, description="The most servers to answer.")
]
RetentionDays = Annotated[
    int | None,
    Query(ge=0, le=36500, description="Default: the memory's janitor_retention_days."),
]

ForgetAt = Annotated[
    float | None,
    Query(
        ge=0,
        lt=1e11,
        allow_inf_nan=False,  # "nan" would otherwise fail as "not less than 1e11"
        description="The platform's time of the command, epoch seconds (a `/refresh` "
        "interaction's creation time): every message written up to it is never captured "
        "again, however often a later turn passes the platform's history. Default: the "
        "memory's clock. At most 300 s ahead of it.",
        examples=[1767225600.5],
    ),
]
