"""Shared machinery for the wire models.

Three rules hold for every model in :mod:`openagentcore.types`:

* Unknown fields are kept, never rejected: a newer server must not break an older SDK.
* Field presence is tracked, so :meth:`WireModel.to_wire` writes back exactly the fields
  that were given (an explicit ``None`` is sent, an omitted field is not).
* Every union keyed by ``type`` has an ``Unknown*`` member that catches types this SDK
  does not know yet, so parsing needs no ``try``/``except``.

Enumerations that the server may extend (``status``, ``phase``, error codes...) are typed
as ``Literal[...] | str``: the literal documents the values known today, and the ``str``
keeps a value added later from failing validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Discriminator, model_validator
from typing_extensions import Self

__all__ = ["UNKNOWN_TAG", "TypedModel", "UnknownModel", "WireModel", "type_discriminator"]

#: The union tag that every ``type`` this SDK does not know maps to.
UNKNOWN_TAG = "__unknown__"


class WireModel(BaseModel):
    """Base of every wire model: lenient about extra fields, strict about presence."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    #: Constant fields the server requires, written by :meth:`to_wire` even when left at
    #: their default (a discriminator ``type``, a message ``role``, an ``object`` name).
    _always_sent: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _count_constants_as_set(self) -> Self:
        self.__pydantic_fields_set__.update(self._always_sent)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON body for this value, with only the fields that were set.

        An explicit ``None`` is kept and an omitted field is left out, which matters
        where the server treats the two differently (function results, for example).
        """
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class TypedModel(WireModel):
    """A member of a union keyed by the ``type`` field.

    Subclasses declare ``type: Literal["..."] = "..."``; ``TYPE`` is derived from that
    default so code can compare against ``SessionIdleEvent.TYPE`` instead of repeating
    the string. ``type`` always counts as set, so :meth:`to_wire` never drops it.
    """

    TYPE: ClassVar[str]
    _always_sent: ClassVar[frozenset[str]] = frozenset({"type"})

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields.get("type")
        if field is not None and isinstance(field.default, str):
            cls.TYPE = field.default


class UnknownModel(WireModel):
    """A union member whose ``type`` this SDK does not know; all its data is kept."""

    type: str

    @property
    def raw(self) -> dict[str, Any]:
        """The payload as received, including every field this SDK has no name for."""
        return self.model_dump(by_alias=True, exclude_unset=True)


def type_discriminator(*members: type[TypedModel]) -> Discriminator:
    """Route a payload to the union member named by its ``type``, else to ``UNKNOWN_TAG``.

    Works on raw mappings and on already-built models, so a union field also accepts
    instances constructed in code.
    """
    known = frozenset(member.TYPE for member in members)

    def tag(value: Any) -> str:
        type_ = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
        return type_ if isinstance(type_, str) and type_ in known else UNKNOWN_TAG

    return Discriminator(tag)
