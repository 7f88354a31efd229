"""One spelling for each model server address, so that a self-hosted judge is one judge however
its URL is written (`http://LOCALHOST:8091/v1/`, `http://127.0.0.1:8091/v1`, `http://[::1]:8091/v1`).

The canonical form keeps what selects the server and the API under it, and nothing else: the
scheme and host lowercased, every spelling of this machine as `loopback` (localhost and its
subdomains, 127.0.0.0/8, ::1, the unspecified addresses 0.0.0.0 and ::, which a connection
reaches this machine by, and any name that resolves only to such addresses), IP addresses in their
compressed form, the port always written (80 for http, 443 for https), the path with repeated
and trailing slashes, `.` and `..` removed, and the query kept. Credentials in the URL and the
fragment are dropped: they never select a server, and an identity is stored and listed.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import socket
from urllib.parse import urlsplit

import anyio

LOOPBACK = "loopback"
DEFAULT_PORTS = {"http": 80, "https": 443}
# A name whose resolution takes longer than this keeps its spelling.
RESOLVE_TIMEOUT_S = 2.0
_SLASHES = re.compile(r"/{2,}")


def canonical_base_url(url: str, *, resolves_to_loopback: bool = False) -> str:
    """The canonical form of `url`; `resolves_to_loopback`: the host name was found to name
    only loopback addresses (see `resolves_only_to_loopback`)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = _host(url)
    host = LOOPBACK if resolves_to_loopback or _is_loopback(host) else _compressed(host)
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a port number: the SDK refuses the URL anyway
        port = None
    path = posixpath.normpath(_SLASHES.sub("/", parts.path)) if parts.path else ""
    path = "" if path in ("/", ".") else path
    address = f"{host}:{port}" if port is not None else host
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{address}{path}{query}"


async def resolves_only_to_loopback(url: str) -> bool:
    """Whether the host of `url` is a name (not an address, not `localhost`, which needs no
    lookup) whose every address is this machine's (loopback or unspecified, as `0` is)."""
    host = _host(url)
    if not host or _ip(host) is not None or _is_loopback(host):
        return False
    with anyio.move_on_after(RESOLVE_TIMEOUT_S):
        try:
            found = await anyio.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return False
        addresses = [_ip(str(sockaddr[0]).split("%")[0]) for *_, sockaddr in found]
        return bool(addresses) and all(_is_this_machine(a) for a in addresses)
    return False


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761
        return True
    return _is_this_machine(_ip(host))


def _is_this_machine(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    """Loopback, or unspecified: a connection to 0.0.0.0 or :: reaches this machine (Linux and
    macOS route it to loopback), so `http://0.0.0.0:8080/v1` is the same server as
    `http://127.0.0.1:8080/v1`."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and (address.is_loopback or address.is_unspecified)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _compressed(host: str) -> str:
    address = _ip(host)
    if address is None:
        return host
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _host(url: str) -> str:
    """The host of `url` as urllib reads it (lowercased), without a trailing root dot."""
    return (urlsplit(url.strip()).hostname or "").rstrip(".")
