"""An attribute that is one of a part's attributes, named once where the owner lists it.

``Memory`` shows its engine's state (``memory.config`` is ``memory._engine.config``) and a
``Turn`` shows its arguments (``turn.user_id`` is ``turn.args.user_id``) through these.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Generic, TypeVar, overload

__all__ = ["Forwarded"]

T = TypeVar("T")


class Forwarded(Generic[T]):
    """The attribute of the same name on the owner's part at ``part`` (a dotted path), read
    only unless ``writable``."""

    __slots__ = ("_name", "_part", "_writable")

    def __init__(self, part: str, *, writable: bool = False) -> None:
        self._part = attrgetter(part)
        self._writable = writable
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Forwarded[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(self._part(obj), self._name)

    def __set__(self, obj: object, value: T) -> None:
        if not self._writable:
            raise AttributeError(f"{self._name} is read-only")
        setattr(self._part(obj), self._name, value)
