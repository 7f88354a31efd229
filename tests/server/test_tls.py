"""TLS and mutual TLS at the edge: real servers on loopback with certificates made per test, real
channels that trust the right CA or the wrong one, and one plain line for every bad --tls-* flag."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# The certificate factory is shared test support, one folder up.
sys.path.insert(0, str(Path(__file__).parents[1]))

from certs import Ca, Issued, issue, make_ca

from tierank.server.rpc.tls import TlsSettingsError, peer_certificate_subject, server_credentials

SUBJECT_METHOD = "/tierank.test.Peer/Subject"


@dataclass(frozen=True)
class Pki:
    server_ca: Ca
    client_ca: Ca
    other_ca: Ca
    server: Issued
    client: Issued
    rogue_client: Issued  # right shape, signed by a CA the server does not trust


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    server_ca = make_ca(tmp_path, "server-ca")
    client_ca = make_ca(tmp_path, "client-ca")
    other_ca = make_ca(tmp_path, "other-ca")
    return Pki(
        server_ca,
        client_ca,
        other_ca,
        server=issue(server_ca, tmp_path, "tierank", server=True),
        client=issue(client_ca, tmp_path, "team-a", server=False, organization="Example"),
        rogue_client=issue(other_ca, tmp_path, "team-a", server=False, organization="Example"),
    )


@asynccontextmanager
async def serving(
    credentials: grpc.ServerCredentials | None,
) -> AsyncIterator[tuple[int, list[str | None]]]:
    """A server with standard health and one method that records each call's peer subject;
    yields its port and the subjects recorded so far."""
    subjects: list[str | None] = []

    async def record_subject(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        subjects.append(peer_certificate_subject(context))
        return b""

    server = grpc.aio.server()
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "tierank.test.Peer",
                {"Subject": grpc.unary_unary_rpc_method_handler(record_subject)},
            )
        ]
    )
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        yield port, subjects
    finally:
        await server.stop(None)


def client_credentials(ca: Path, client: Issued | None = None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )


async def check_health(target: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.aio.insecure_channel(target)
        if credentials is None
        else grpc.aio.secure_channel(target, credentials)
    )
    async with channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        return answer.status


async def call_subject(target: str, credentials: grpc.ChannelCredentials) -> None:
    async with grpc.aio.secure_channel(target, credentials) as channel:
        await channel.unary_unary(SUBJECT_METHOD)(b"", timeout=10)


async def assert_refused(target: str, credentials: grpc.ChannelCredentials | None) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await check_health(target, credentials)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()


# TLS


# The server certificate names 127.0.0.1 (IP) and localhost (DNS): no target name override.
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_client_trusting_the_ca_gets_serving(pki: Pki, host: str):
    async with serving(server_credentials(pki.server.cert, pki.server.key, None)) as (port, _):
        status = await check_health(f"{host}:{port}", client_credentials(pki.server_ca.cert))
        assert status == health_pb2.HealthCheckResponse.SERVING


async def test_a_client_trusting_another_ca_is_refused(pki: Pki):
    async with serving(server_credentials(pki.server.cert, pki.server.key, None)) as (port, _):
        await assert_refused(f"127.0.0.1:{port}", client_credentials(pki.other_ca.cert))


async def test_a_plaintext_client_is_refused_by_a_tls_server(pki: Pki):
    async with serving(server_credentials(pki.server.cert, pki.server.key, None)) as (port, _):
        await assert_refused(f"127.0.0.1:{port}", None)


async def test_a_cert_file_holding_the_whole_chain_serves(pki: Pki, tmp_path: Path):
    chain = tmp_path / "chain.crt"
    chain.write_bytes(pki.server.cert.read_bytes() + pki.server_ca.cert.read_bytes())
    async with serving(server_credentials(chain, pki.server.key, None)) as (port, _):
        status = await check_health(f"127.0.0.1:{port}", client_credentials(pki.server_ca.cert))
        assert status == health_pb2.HealthCheckResponse.SERVING


async def test_without_a_client_ca_no_peer_subject_is_reported(pki: Pki):
    # The server never asks for a client certificate, so one the client holds is not sent.
    async with serving(server_credentials(pki.server.cert, pki.server.key, None)) as (
        port,
        subjects,
    ):
        await call_subject(f"127.0.0.1:{port}", client_credentials(pki.server_ca.cert, pki.client))
        assert subjects == [None]


async def test_a_plaintext_call_has_no_peer_subject():
    async with serving(None) as (port, subjects):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await channel.unary_unary(SUBJECT_METHOD)(b"", timeout=10)
        assert subjects == [None]


# Mutual TLS


async def test_mtls_client_with_a_cert_from_the_client_ca_is_served_and_named(pki: Pki):
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.client_ca.cert)
    async with serving(credentials) as (port, subjects):
        target = f"127.0.0.1:{port}"
        with_cert = client_credentials(pki.server_ca.cert, pki.client)
        assert await check_health(target, with_cert) == health_pb2.HealthCheckResponse.SERVING
        await call_subject(target, with_cert)
        assert subjects == ["CN=team-a,O=Example"]


async def test_mtls_client_without_a_cert_is_refused(pki: Pki):
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.client_ca.cert)
    async with serving(credentials) as (port, subjects):
        await assert_refused(f"127.0.0.1:{port}", client_credentials(pki.server_ca.cert))
        assert subjects == []


async def test_mtls_client_with_a_cert_from_an_untrusted_ca_is_refused(pki: Pki):
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.client_ca.cert)
    async with serving(credentials) as (port, subjects):
        rogue = client_credentials(pki.server_ca.cert, pki.rogue_client)
        await assert_refused(f"127.0.0.1:{port}", rogue)
        with pytest.raises(grpc.aio.AioRpcError):
            await call_subject(f"127.0.0.1:{port}", rogue)
        assert subjects == []


# Bad flags: one plain line naming the flag, before gRPC sees anything.


def test_no_cert_and_no_key_means_plaintext():
    assert server_credentials(None, None, None) is None


def _encrypted_key(pki: Pki, tmp_path: Path) -> Path:
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), password=None)
    path = tmp_path / "encrypted.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return path


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.pem"
    path.write_text("not a certificate\n")
    return path


Case = Callable[[Pki, Path], tuple[Path | None, Path | None, Path | None, str]]

BAD_FLAGS: dict[str, Case] = {
    "cert without key": lambda p, t: (
        p.server.cert,
        None,
        None,
        "--tls-key is needed with --tls-cert",
    ),
    "key without cert": lambda p, t: (
        None,
        p.server.key,
        None,
        "--tls-cert is needed with --tls-key",
    ),
    "client ca alone": lambda p, t: (
        None,
        None,
        p.client_ca.cert,
        "--tls-client-ca needs --tls-cert and --tls-key",
    ),
    "client ca with cert only": lambda p, t: (
        p.server.cert,
        None,
        p.client_ca.cert,
        "--tls-key is needed with --tls-cert",
    ),
    "missing cert file": lambda p, t: (
        t / "absent.crt",
        p.server.key,
        None,
        f"cannot read --tls-cert {t / 'absent.crt'}: No such file or directory",
    ),
    "missing key file": lambda p, t: (
        p.server.cert,
        t / "absent.key",
        None,
        f"cannot read --tls-key {t / 'absent.key'}: No such file or directory",
    ),
    "missing client ca file": lambda p, t: (
        p.server.cert,
        p.server.key,
        t / "absent-ca.crt",
        f"cannot read --tls-client-ca {t / 'absent-ca.crt'}: No such file or directory",
    ),
    "cert is a folder": lambda p, t: (
        t,
        p.server.key,
        None,
        f"cannot read --tls-cert {t}: Is a directory",
    ),
    "cert is garbage": lambda p, t: (
        _garbage(t),
        p.server.key,
        None,
        f"--tls-cert {t / 'garbage.pem'} is not a PEM certificate",
    ),
    "cert is a key": lambda p, t: (
        p.server.key,
        p.server.key,
        None,
        f"--tls-cert {p.server.key} is not a PEM certificate",
    ),
    "key is garbage": lambda p, t: (
        p.server.cert,
        _garbage(t),
        None,
        f"--tls-key {t / 'garbage.pem'} is not a PEM private key",
    ),
    "key is a cert": lambda p, t: (
        p.server.cert,
        p.server.cert,
        None,
        f"--tls-key {p.server.cert} is not a PEM private key",
    ),
    "key is encrypted": lambda p, t: (
        p.server.cert,
        _encrypted_key(p, t),
        None,
        f"--tls-key {t / 'encrypted.key'} is encrypted; give an unencrypted key",
    ),
    "key of another cert": lambda p, t: (
        p.server.cert,
        p.client.key,
        None,
        "--tls-key does not match --tls-cert",
    ),
    "client ca is garbage": lambda p, t: (
        p.server.cert,
        p.server.key,
        _garbage(t),
        f"--tls-client-ca {t / 'garbage.pem'} is not a PEM certificate",
    ),
}


@pytest.mark.parametrize("case", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_tls_flags_fail_in_one_line_naming_the_flag(pki: Pki, tmp_path: Path, case: Case):
    cert, key, client_ca, message = case(pki, tmp_path)
    with pytest.raises(TlsSettingsError) as error:
        server_credentials(cert, key, client_ca)
    assert str(error.value) == message
    assert "\n" not in str(error.value)
