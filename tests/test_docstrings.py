"""Every public class, function and method has a docstring: the API reference is built
from them (docs/reference), so a missing one is a hole in the documentation."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Iterator
from typing import Any

import openagentcore
import openagentcore.local
import openagentcore.store
import openagentcore.types

PUBLIC_MODULES = (
    openagentcore,
    openagentcore.types,
    openagentcore.store,
    openagentcore.local,
)


def _ours(module_name: str | None) -> bool:
    return bool(module_name) and (
        module_name == "openagentcore" or module_name.startswith("openagentcore.")
    )


def _resource_classes() -> set[type]:
    """The resource classes reachable from a client's attributes (``client.sessions.items``)."""
    found: set[type] = set()
    clients = [
        openagentcore.Client(api_key="sk-docs", base_url="http://127.0.0.1:1/v1"),
        openagentcore.AsyncClient(api_key="sk-docs", base_url="http://127.0.0.1:1/v1"),
    ]

    def walk(value: object) -> None:
        for name, attribute in vars(value).items():
            kind = type(attribute)
            if name.startswith("_") or not _ours(kind.__module__) or kind in found:
                continue
            found.add(kind)
            walk(attribute)

    for client in clients:
        walk(client)
    clients[0].close()
    return found


def _public_objects() -> Iterator[tuple[str, Any]]:
    seen: set[int] = set()
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            if id(value) not in seen and (inspect.isclass(value) or inspect.isfunction(value)):
                seen.add(id(value))
                yield f"{module.__name__}.{name}", value
    for kind in sorted(_resource_classes(), key=lambda k: k.__qualname__):
        if id(kind) not in seen:
            seen.add(id(kind))
            yield f"{kind.__module__}.{kind.__qualname__}", kind


def _members(kind: type) -> Iterator[tuple[str, str, object]]:
    """Public methods and properties defined by the package's own classes in ``kind``'s MRO."""
    for owner in kind.__mro__:
        if not _ours(owner.__module__):
            continue
        for name, member in vars(owner).items():
            if name.startswith("_"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            elif isinstance(member, functools.cached_property):
                member = member.func
            if isinstance(member, (types.FunctionType, types.MethodType)):
                yield owner.__module__, f"{owner.__qualname__}.{name}", member


# A store's methods implement this protocol, whose docstrings say what each one promises
# (the reference documents them there); an implementation may add its own.
DOCUMENTED_PROTOCOLS = (openagentcore.store.ResultStore,)


def _documented_by_protocol(kind: type, name: str) -> bool:
    for protocol in DOCUMENTED_PROTOCOLS:
        method = vars(protocol).get(name)
        implements = all(
            hasattr(kind, member)
            for member in vars(protocol)
            if not member.startswith("_") and callable(vars(protocol)[member])
        )
        if implements and method is not None and inspect.getdoc(method):
            return True
    return False


def _missing() -> list[str]:
    missing: list[str] = []
    for label, value in _public_objects():
        if not (value.__doc__ or "").strip():
            missing.append(label)
        if inspect.isclass(value):
            for module_name, qualname, member in _members(value):
                name = qualname.rsplit(".", 1)[1]
                if inspect.getdoc(member) or _documented_by_protocol(value, name):
                    continue
                missing.append(f"{module_name}.{qualname}")
    return sorted(set(missing))


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    assert _missing() == []


def test_the_walk_reaches_the_resources_and_their_methods() -> None:
    """The check would pass vacuously if it found nothing to look at."""
    names = {f"{k.__module__}.{k.__qualname__}" for k in _resource_classes()}
    assert "openagentcore.resources.sessions.Sessions" in names
    assert "openagentcore.resources.items.Items" in names or any("Items" in n for n in names)
    client_members = {qualname for _, qualname, _ in _members(openagentcore.Client)}
    assert {"Client.close", "Client.base_url"} <= client_members
