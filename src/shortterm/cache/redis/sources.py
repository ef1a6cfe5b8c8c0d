"""The text of the Lua scripts in ``lua/``: the tier's, and the sidecar turn registry's.

Apart from the tier's modules, so that the sidecar reads its scripts without the ``redis``
extra installed (it needs it only to run them on a Redis).
"""

from __future__ import annotations

from importlib import resources

__all__ = ["lua_source"]


def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
