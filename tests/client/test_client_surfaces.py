"""The blocking and the async client offer the same calls: every public method of one is the
other's, with the same parameters (names, kinds and defaults), so that code moves between them by
adding or removing `await`."""

from __future__ import annotations

import inspect

from tierank.client import AsyncClient, Client

# Their own ways of being closed and used in a `with`: the rest is the service's surface.
_CONTEXT = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_both_clients_have_the_same_public_methods() -> None:
    assert sorted(_public(Client)) == sorted(_public(AsyncClient))
    assert len(_public(Client)) >= 25  # the whole surface, not an empty pair of classes


def test_each_method_takes_the_same_parameters_in_both_clients() -> None:
    blocking, asynchronous = _public(Client), _public(AsyncClient)
    for name, signature in blocking.items():
        other = asynchronous[name]
        assert [(p.name, p.kind, p.default) for p in signature.parameters.values()] == [
            (p.name, p.kind, p.default) for p in other.parameters.values()
        ], name


def test_what_the_async_client_awaits_the_blocking_one_returns() -> None:
    """A call that answers once is a coroutine on the async client; a listing or a stream is
    an iterator on both, never a coroutine."""
    for name, method in inspect.getmembers(AsyncClient, inspect.isfunction):
        if name.startswith("_") or name in _CONTEXT:
            continue
        streams = name.startswith(("list_", "watch_")) or name == "rank"
        assert inspect.iscoroutinefunction(method) is not streams, name
