"""How a client reaches a server: TLS (optionally with a client certificate) and an API key.

Both clients and every CLI command open their channels here, so the key is attached in one
place, an interceptor that adds `authorization: Bearer <key>` to every call, unary and
streaming alike. The key is kept out of every repr and error message.

PEM material is given as bytes (the PEM text itself) or as a path (str or os.PathLike) that is
read once, when the client is made. It is checked with `cryptography` before gRPC sees it, so
that a wrong file is one plain line naming the option instead of a handshake failure later;
`cryptography` is imported only then, since most commands name no PEM file and every command
starts by importing this module.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

Pem = bytes | str | os.PathLike[str]

# How the options are called in error messages: keyword arguments for Python, flags for the CLI.
KEYWORD_NAMES: Mapping[str, str] = {
    "api_key": "api_key",
    "tls_ca": "tls_ca",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
}

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_Call = TypeVar("_Call")


class ConnectionSettingsError(ValueError):
    """A connection option is unusable: an API key that cannot be sent, or a TLS file that is
    missing, unreadable, not PEM, or does not fit with the others. The message is one line and
    never contains the key."""


@dataclass(frozen=True)
class ChannelSecurity:
    """What `secure_channel` / `aio_channel` need, checked and loaded. The default is a
    plaintext channel without a key (a loopback development server)."""

    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        # root_certificates=None: gRPC's default trust roots (the bundle shipped with grpcio,
        # or $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of `Client` / `AsyncClient` that make this security again."""
        return {
            "api_key": self.api_key,
            "tls": self.tls,
            "tls_ca": self.root_certificates,
            "tls_cert": self.certificate_chain,
            "tls_key": self.private_key,
        }


def channel_security(
    *,
    api_key: str | None = None,
    tls: bool = False,
    tls_ca: Pem | None = None,
    tls_cert: Pem | None = None,
    tls_key: Pem | None = None,
    names: Mapping[str, str] = KEYWORD_NAMES,
) -> ChannelSecurity:
    """Check and load the options. TLS is on with `tls`, `tls_ca` or a client certificate;
    `tls_cert` and `tls_key` go together. An empty key means no key."""
    if (tls_cert is None) != (tls_key is None):
        given, missing = ("tls_cert", "tls_key") if tls_key is None else ("tls_key", "tls_cert")
        raise ConnectionSettingsError(f"{names[missing]} is needed with {names[given]}")
    root = _certificates(names["tls_ca"], tls_ca) if tls_ca is not None else None
    chain = private_key = None
    if tls_cert is not None and tls_key is not None:
        chain = _certificates(names["tls_cert"], tls_cert)
        private_key = _private_key(names, tls_key, chain)
    return ChannelSecurity(
        api_key=_checked_key(names["api_key"], api_key),
        tls=tls or root is not None or chain is not None,
        root_certificates=root,
        certificate_chain=chain,
        private_key=private_key,
    )


def sync_channel(
    target: str, security: ChannelSecurity, options: list[tuple[str, Any]] | None = None
) -> grpc.Channel:
    if security.tls:
        channel = grpc.secure_channel(target, security.channel_credentials(), options)
    else:
        channel = grpc.insecure_channel(target, options)
    if security.api_key is None:
        return channel
    return grpc.intercept_channel(channel, _SyncBearer(security.api_key))


def aio_channel(
    target: str, security: ChannelSecurity, options: list[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    interceptors: list[grpc.aio.ClientInterceptor] | None = None
    if security.api_key is not None:
        # grpc.aio files each interceptor under one call kind only, so one object per kind.
        interceptors = [_AioUnaryBearer(security.api_key), _AioStreamBearer(security.api_key)]
    if security.tls:
        return grpc.aio.secure_channel(
            target, security.channel_credentials(), options, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options, interceptors=interceptors)


def _checked_key(name: str, api_key: str | None) -> str | None:
    key = (api_key or "").strip()
    if not key:
        return None
    # gRPC refuses other header bytes only when the call is sent, as an opaque INTERNAL error.
    if not all("!" <= character <= "~" for character in key):
        raise ConnectionSettingsError(
            f"{name} must be printable ASCII without spaces (the key is not shown here)"
        )
    return key


def _read(name: str, value: Pem) -> tuple[bytes, str]:
    """The PEM bytes, and how to name them in a message ("--tls-ca ca.pem", or just "tls_ca")."""
    if isinstance(value, bytes):
        return value, name
    try:
        return Path(value).read_bytes(), f"{name} {os.fspath(value)}"
    except OSError as error:
        raise ConnectionSettingsError(
            f"cannot read {name} {os.fspath(value)}: {error.strerror}"
        ) from None


def _certificates(name: str, value: Pem) -> bytes:
    from cryptography import x509

    pem, described = _read(name, value)
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ConnectionSettingsError(f"{described} is not a PEM certificate") from None
    return pem


def _private_key(names: Mapping[str, str], value: Pem, chain: bytes) -> bytes:
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    pem, described = _read(names["tls_key"], value)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        # cryptography's way of saying the key is encrypted: gRPC cannot ask for a password.
        raise ConnectionSettingsError(
            f"{described} is encrypted; give an unencrypted key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConnectionSettingsError(f"{described} is not a PEM private key") from None
    leaf = x509.load_pem_x509_certificates(chain)[0]
    if _public_der(key.public_key()) != _public_der(leaf.public_key()):
        raise ConnectionSettingsError(f"{names['tls_key']} does not match {names['tls_cert']}")
    return pem


def _public_der(public_key: PublicKeyTypes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _bearer(api_key: str) -> tuple[str, str]:
    return ("authorization", f"Bearer {api_key}")


class _SyncDetails(grpc.ClientCallDetails):
    def __init__(self, details: grpc.ClientCallDetails, api_key: str) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = (*(details.metadata or ()), _bearer(api_key))
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = details.compression


# The API has unary and server-streaming calls only, so only those two kinds are intercepted.
class _SyncBearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, api_key: str) -> None:
        self._api_key = api_key

    def __repr__(self) -> str:
        return "_SyncBearer(api_key=...)"

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, _Request], _Call],
        client_call_details: grpc.ClientCallDetails,
        request: _Request,
    ) -> _Call:
        return continuation(_SyncDetails(client_call_details, self._api_key), request)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, _Request], _Call],
        client_call_details: grpc.ClientCallDetails,
        request: _Request,
    ) -> _Call:
        return continuation(_SyncDetails(client_call_details, self._api_key), request)


class _AioBearer:
    def __init__(self, api_key: str) -> None:
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"{type(self).__name__}(api_key=...)"

    def _with_key(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), _bearer(self._api_key))
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _AioUnaryBearer(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, _Request],
            Awaitable[grpc.aio.UnaryUnaryCall[_Request, _Response]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _Request,
    ) -> grpc.aio.UnaryUnaryCall[_Request, _Response]:
        return await continuation(self._with_key(client_call_details), request)


class _AioStreamBearer(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, _Request],
            Awaitable[grpc.aio.UnaryStreamCall[_Request, _Response]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _Request,
    ) -> grpc.aio.UnaryStreamCall[_Request, _Response]:
        return await continuation(self._with_key(client_call_details), request)
