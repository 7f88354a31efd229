"""One spelling per model server address (issue 22 item 13)."""

from __future__ import annotations

import socket

import pytest

from tierank.server.judges.endpoints import canonical_base_url, resolves_only_to_loopback

SAME_SERVER = [
    "http://127.0.0.1:8091/v1",
    "http://127.0.0.1:8091/v1/",
    "http://localhost:8091/v1",
    "HTTP://LocalHost:8091/v1",
    "http://localhost.:8091//v1//",
    "http://[::1]:8091/v1",
    "http://[::ffff:127.0.0.1]:8091/v1",
    "http://127.0.0.2:8091/v1",
    "http://127.0.0.1:8091/x/../v1/.",
    "http://user:secret@127.0.0.1:8091/v1#part",
    " http://127.0.0.1:8091/v1 ",
    # Unspecified addresses: a connection to them reaches this machine (issue 34 item 21).
    "http://0.0.0.0:8091/v1",
    "http://[::]:8091/v1",
    "http://[::ffff:0.0.0.0]:8091/v1",
]


@pytest.mark.parametrize("spelling", SAME_SERVER)
def test_every_spelling_of_one_server_is_one_address(spelling: str) -> None:
    assert canonical_base_url(spelling) == "http://loopback:8091/v1"


def test_credentials_never_reach_an_identity() -> None:
    assert "secret" not in canonical_base_url("https://me:secret@models.example.org/v1")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("http://gpu-1.lan/v1", "http://GPU-1.lan:80/v1/"),
        ("https://models.example.org/v1", "https://models.example.org:443/v1"),
        ("http://[2001:db8:0::1]:8000/v1", "http://[2001:db8::1]:8000/v1"),
        ("http://10.0.0.5:8000/v1?api-version=2", "http://10.0.0.5:8000/v1/?api-version=2"),
    ],
)
def test_default_ports_case_and_slashes_do_not_make_another_server(one: str, other: str) -> None:
    assert canonical_base_url(one) == canonical_base_url(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("http://127.0.0.1:8091/v1", "http://127.0.0.1:8092/v1"),
        ("http://127.0.0.1:8091/v1", "https://127.0.0.1:8091/v1"),
        ("http://127.0.0.1:8091/v1", "http://127.0.0.1:8091/compat/v1"),
        ("http://127.0.0.1:8091/v1", "http://10.0.0.5:8091/v1"),
        ("http://gpu-1.lan:8000/v1", "http://gpu-2.lan:8000/v1"),
    ],
)
def test_other_servers_stay_apart(one: str, other: str) -> None:
    assert canonical_base_url(one) != canonical_base_url(other)


async def test_a_name_is_loopback_only_when_all_its_addresses_are() -> None:
    # Looked up: this machine's own name (loopback only where /etc/hosts maps it so).
    own = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(own, None)}
    expected = all(address.startswith("127.") or address == "::1" for address in addresses)
    assert await resolves_only_to_loopback(f"http://{own}:8091/v1") == expected
    # Addresses and localhost are read as written, never looked up.
    assert not await resolves_only_to_loopback("http://127.0.0.1:8091/v1")
    assert not await resolves_only_to_loopback("http://localhost:8091/v1")
    assert not await resolves_only_to_loopback("http://no-such-host.invalid:8091/v1")
