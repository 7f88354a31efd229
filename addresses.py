"""`host:port` addresses, read one way for the server (--listen, --metrics-listen) and its
command line (--server), so that a mistyped address is refused at once, saying what is wrong
and what is expected, instead of being bound elsewhere or waited on in vain."""

from __future__ import annotations

import socket
from dataclasses import dataclass

MAX_PORT = 65535
EXPECTED = "HOST:PORT, e.g. 127.0.0.1:50051 or [::1]:50051"


@dataclass(frozen=True)
class Address:
    # Without brackets; empty only for a listening address (every interface).
    host: str
    port: int


def parse_address(text: str, *, listening: bool) -> Address:
    """`text` as host:port (an IPv6 host in brackets); a listening address may leave the host
    empty (every interface) and take port 0 (a free one). ValueError says what is wrong."""
    if not text.strip():
        raise ValueError(f"is empty; expected {EXPECTED}")
    if "://" in text:
        raise ValueError(f"{text!r} is a URL; expected {EXPECTED}, with no scheme or path")
    host, colon, port = text.rpartition(":")
    if not colon or (host.startswith("[") and not host.endswith("]")):
        raise ValueError(f"{text!r} has no port; expected {EXPECTED}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets; expected {EXPECTED}")
    if not port:
        raise ValueError(f"{text!r} has no port; expected {EXPECTED}")
    if not port.isdigit():
        raise ValueError(f"{text!r}: the port {port!r} is not a number; expected {EXPECTED}")
    lowest = 0 if listening else 1
    if not lowest <= int(port) <= MAX_PORT:
        raise ValueError(f"{text!r}: port must be {lowest}-{MAX_PORT}, not {int(port)}")
    if not host and not listening:
        raise ValueError(f"{text!r} has no host; expected {EXPECTED}")
    return Address(host, int(port))


def resolve(address: Address) -> list[tuple]:
    """`address`'s socket addresses (getaddrinfo's entries); ValueError says why its host name
    does not resolve."""
    try:
        return socket.getaddrinfo(address.host or None, address.port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(
            f"the host name {address.host!r} does not resolve ({error.strerror})"
        ) from None
    except UnicodeError:
        raise ValueError(f"{address.host!r} is not a host name") from None
