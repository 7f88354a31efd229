"""Server-side TLS and mutual TLS: credentials from the --tls-* flags, and the subject of the
client certificate a call arrived with.

The PEM files are checked here with `cryptography` before gRPC sees them, so that a bad flag is
reported in one plain line naming it instead of a gRPC core error at bind or handshake time."""

from __future__ import annotations

from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes


class TlsSettingsError(ValueError):
    """The --tls-* flags name a bad combination or a file that is missing or not valid."""


def server_credentials(
    cert: Path | None, key: Path | None, client_ca: Path | None
) -> grpc.ServerCredentials | None:
    """TLS credentials for `server.add_secure_port`, or None to serve plaintext (no cert, no key).

    With `client_ca`, every client must present a certificate that CA signed (mutual TLS)."""
    if cert is None and key is None:
        if client_ca is not None:
            raise TlsSettingsError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if key is None:
        raise TlsSettingsError("--tls-key is needed with --tls-cert")
    if cert is None:
        raise TlsSettingsError("--tls-cert is needed with --tls-key")
    chain_pem = _read("--tls-cert", cert)
    chain = _certificates("--tls-cert", cert, chain_pem)
    key_pem = _read("--tls-key", key)
    _check_key_matches(key, key_pem, chain[0])
    if client_ca is None:
        return grpc.ssl_server_credentials([(key_pem, chain_pem)])
    ca_pem = _read("--tls-client-ca", client_ca)
    _certificates("--tls-client-ca", client_ca, ca_pem)
    return grpc.ssl_server_credentials(
        [(key_pem, chain_pem)], root_certificates=ca_pem, require_client_auth=True
    )


def peer_certificate_subject(context: grpc.aio.ServicerContext) -> str | None:
    """The RFC 4514 subject ("CN=team-a,O=Example") of the certificate the client presented,
    or None when it presented none. gRPC exposes a certificate only once it has verified it
    against --tls-client-ca, so the subject can be trusted."""
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return None
    return x509.load_pem_x509_certificate(next(iter(pems))).subject.rfc4514_string()


def _read(flag: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise TlsSettingsError(f"cannot read {flag} {path}: {error.strerror}") from None


def _certificates(flag: str, path: Path, pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise TlsSettingsError(f"{flag} {path} is not a PEM certificate") from None


def _check_key_matches(path: Path, pem: bytes, leaf: x509.Certificate) -> None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        # cryptography's way of saying the key is encrypted: gRPC cannot prompt for a password.
        raise TlsSettingsError(f"--tls-key {path} is encrypted; give an unencrypted key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsSettingsError(f"--tls-key {path} is not a PEM private key") from None
    if _public_der(key.public_key()) != _public_der(leaf.public_key()):
        raise TlsSettingsError("--tls-key does not match --tls-cert")


def _public_der(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
