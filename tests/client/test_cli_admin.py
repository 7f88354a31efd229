"""API keys, TLS and the admin commands (`keys`, `tenants`, `usage`) from the client's side.

The servers here are stand-ins on loopback, made in this file: a real gRPC server (plaintext,
TLS or mutual TLS, certificates made per test) that implements AdminService and the RankService
calls the CLI uses, records each call's `authorization` header, and answers UNAUTHENTICATED or
PERMISSION_DENIED as the real one does. `--db` runs a stand-in admin tool that records what it
was given. Every command runs as a real `tierank` process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from cli_process import REPO_ROOT, cli_environment, tierank, unused_address
from google.protobuf import json_format

from tierank.client import AsyncClient, Client, ConnectionSettingsError, LocalServer
from tierank.client.cli import build_parser
from tierank.v1 import admin_pb2, admin_pb2_grpc, rank_pb2, rank_pb2_grpc

# The certificate factory is shared test support, one folder up.
sys.path.insert(0, str(Path(__file__).parents[1]))

from certs import Ca, Issued, issue, make_ca

pytestmark = pytest.mark.long_module

ADMIN_KEY = "trk_00000000a11c_" + "A" * 43
MEMBER_KEY = "trk_00000000b0b0_" + "B" * 43
WRONG_KEY = "trk_0000000bad00_" + "C" * 43
NEW_SECRET = "trk_0123456789ab_" + "S" * 43
PROVIDER_KEY = "sk-provider-" + "P" * 24
UNAUTHENTICATED_MESSAGE = "the API key is not valid"
# The real server's own words, hint included.
MISSING_KEY_MESSAGE = "this server needs an API key (tierank --api-key or TIERANK_API_KEY)"
FORBIDDEN_MESSAGE = "AdminService needs an admin key"


# A stand-in server


def _tenant(name: str, **fields: object) -> admin_pb2.Tenant:
    tenant = admin_pb2.Tenant(name=f"tenants/{name}", allow_server_provider_keys=True, **fields)
    tenant.create_time.FromSeconds(1_700_000_000)
    tenant.update_time.FromSeconds(1_700_000_600)
    return tenant


def _key(key_id: str, *, revoked: bool = False, **fields: object) -> admin_pb2.ApiKey:
    key = admin_pb2.ApiKey(name=f"keys/{key_id}", **fields)
    key.create_time.FromSeconds(1_700_000_000)
    if revoked:
        key.revoke_time.FromSeconds(1_700_003_600)
    return key


class Admin(admin_pb2_grpc.AdminServiceServicer):
    """Canned answers; every request is kept, to check what the CLI sent."""

    def __init__(self, requests: list[tuple[str, object]]) -> None:
        self.requests = requests

    def CreateApiKey(self, request, context):
        self.requests.append(("CreateApiKey", request))
        key = _key(
            "0123456789ab",
            tenant=request.tenant,
            role=request.role or admin_pb2.ROLE_MEMBER,
            display_name=request.display_name,
            certificate_subject=request.certificate_subject,
        )
        return admin_pb2.CreateApiKeyResponse(key=key, secret=NEW_SECRET)

    def ListApiKeys(self, request, context):
        self.requests.append(("ListApiKeys", request))
        keys = [
            _key("aaaaaaaaaaaa", tenant="ops", role=admin_pb2.ROLE_ADMIN, display_name="ci"),
            _key(
                "bbbbbbbbbbbb",
                tenant="team-a",
                role=admin_pb2.ROLE_MEMBER,
                display_name="alice [laptop]",
                certificate_subject="CN=team-a,O=Example",
            ),
        ]
        if request.include_revoked:
            keys.append(_key("cccccccccccc", revoked=True, tenant="team-a", role=1))
        return admin_pb2.ListApiKeysResponse(keys=keys)

    def RevokeApiKey(self, request, context):
        self.requests.append(("RevokeApiKey", request))
        key_id = request.name.removeprefix("keys/")
        return _key(key_id, revoked=True, tenant="team-a", role=admin_pb2.ROLE_MEMBER)

    def SetTenant(self, request, context):
        self.requests.append(("SetTenant", request))
        tenant = _tenant(request.tenant, quota=request.quota)
        if request.HasField("allow_server_provider_keys"):
            tenant.allow_server_provider_keys = request.allow_server_provider_keys
        return tenant

    def GetTenant(self, request, context):
        self.requests.append(("GetTenant", request))
        if request.tenant != "team-a":
            context.abort(grpc.StatusCode.NOT_FOUND, f"tenants/{request.tenant} not found")
        quota = admin_pb2.Quota(max_concurrent_jobs=4, daily_cost_usd=2.5)
        return _tenant("team-a", quota=quota, provider_keys=["openai"])

    def ListTenants(self, request, context):
        self.requests.append(("ListTenants", request))
        return admin_pb2.ListTenantsResponse(
            tenants=[
                _tenant("team-a", quota=admin_pb2.Quota(max_concurrent_jobs=4)),
                _tenant("team-b", provider_keys=["anthropic", "openai"]),
            ]
        )

    def SetProviderKey(self, request, context):
        self.requests.append(("SetProviderKey", request))
        return _tenant(request.tenant, provider_keys=[request.provider] if request.api_key else [])

    def GetUsage(self, request, context):
        self.requests.append(("GetUsage", request))
        spend = admin_pb2.JudgeSpend
        return admin_pb2.TenantUsage(
            tenant=request.tenant or "team-a",
            day="2025-06-01",
            today=[
                spend(judge="openai/gpt-4.1-mini", calls=12, input_tokens=24000, cost_usd=0.05),
                spend(judge="lexical", calls=3, input_tokens=900),
            ],
            total=[spend(judge="openai/gpt-4.1-mini", calls=40, input_tokens=81000, cost_usd=0.2)],
            reserved=spend(calls=2, input_tokens=4000, cost_usd=0.01),
            quota=admin_pb2.Quota(daily_judge_calls=100, daily_cost_usd=1.0),
            unfinished_jobs=1,
        )


class Rank(rank_pb2_grpc.RankServiceServicer):
    def ListJobs(self, request, context):
        return rank_pb2.ListJobsResponse()

    def WatchJob(self, request, context):
        yield rank_pb2.JobEvent(job=request.name, sequence=1, completed=rank_pb2.JobCompleted())

    def GetJob(self, request, context):
        return rank_pb2.Job(name=request.name, state=rank_pb2.JOB_STATE_SUCCEEDED)


class KeyCheck(grpc.ServerInterceptor):
    """Records (method, authorization header) of every call; lets only the admin key through,
    the member key to RankService only, as the real server does."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def intercept_service(self, continuation, details):
        authorization = dict(details.invocation_metadata).get("authorization")
        service, method = details.method.rsplit("/", 2)[-2:]
        self.seen.append((method, authorization))
        handler = continuation(details)
        if handler is None or authorization == f"Bearer {ADMIN_KEY}":
            return handler
        if authorization == f"Bearer {MEMBER_KEY}":
            if not service.endswith("AdminService"):
                return handler
            code, message = grpc.StatusCode.PERMISSION_DENIED, FORBIDDEN_MESSAGE
        elif authorization is None:
            code, message = grpc.StatusCode.UNAUTHENTICATED, MISSING_KEY_MESSAGE
        else:
            code, message = grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE

        def deny(request, context):
            context.abort(code, message)

        def deny_stream(request, context):
            context.abort(code, message)
            yield  # a generator, as a streaming handler must be

        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                deny_stream, request_deserializer=handler.request_deserializer
            )
        return grpc.unary_unary_rpc_method_handler(
            deny, request_deserializer=handler.request_deserializer
        )


@dataclass
class StandIn:
    address: str
    keys: KeyCheck
    requests: list[tuple[str, object]] = field(default_factory=list)

    def only(self, method: str) -> object:
        """The one request of this method the server received."""
        matching = [request for name, request in self.requests if name == method]
        assert len(matching) == 1, self.requests
        return matching[0]

    def authorizations(self) -> set[str | None]:
        return {authorization for _, authorization in self.keys.seen}


@pytest.fixture
def serve() -> Iterator[Callable[..., StandIn]]:
    servers: list[grpc.Server] = []

    def start(credentials: grpc.ServerCredentials | None = None) -> StandIn:
        keys = KeyCheck()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=[keys])
        stand_in = StandIn("", keys)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(Admin(stand_in.requests), server)
        rank_pb2_grpc.add_RankServiceServicer_to_server(Rank(), server)
        if credentials is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("127.0.0.1:0", credentials)
        server.start()
        servers.append(server)
        stand_in.address = f"127.0.0.1:{port}"
        return stand_in

    yield start
    for server in servers:
        server.stop(None)


@pytest.fixture
def plain(serve: Callable[..., StandIn]) -> StandIn:
    return serve()


@dataclass(frozen=True)
class Pki:
    ca: Ca
    other_ca: Ca
    server: Issued
    client: Issued


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = make_ca(tmp_path, "ca")
    return Pki(
        ca,
        make_ca(tmp_path, "other-ca"),
        server=issue(ca, tmp_path, "tierank", server=True),
        client=issue(ca, tmp_path, "team-a", server=False),
    )


def tls_credentials(pki: Pki, *, mutual: bool = False) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(pki.server.key.read_bytes(), pki.server.cert.read_bytes())],
        root_certificates=pki.ca.cert.read_bytes() if mutual else None,
        require_client_auth=mutual,
    )


def admin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tierank ARGS` with the admin key in the environment (as a deployment would keep it)."""
    return tierank(*args, env={"TIERANK_API_KEY": ADMIN_KEY, **(env or {})})


def assert_no_secret(result: subprocess.CompletedProcess[str], *secrets: str) -> None:
    for secret in secrets:
        assert secret not in result.stdout
        assert secret not in result.stderr


# The API key on the wire


def test_api_key_flag_is_sent_as_bearer_on_unary_and_streaming_calls(plain: StandIn) -> None:
    listed = tierank("jobs", "--server", plain.address, "--api-key", ADMIN_KEY)
    watched = tierank("watch", "jobs/x", "--server", plain.address, "--api-key", ADMIN_KEY)

    assert listed.returncode == 0, listed.stderr
    assert watched.returncode == 0, watched.stderr
    assert {method for method, _ in plain.keys.seen} == {"ListJobs", "WatchJob"}
    assert plain.authorizations() == {f"Bearer {ADMIN_KEY}"}


def test_api_key_comes_from_the_environment_and_the_flag_wins(plain: StandIn) -> None:
    from_env = tierank("jobs", "--server", plain.address, env={"TIERANK_API_KEY": ADMIN_KEY})
    assert from_env.returncode == 0, from_env.stderr
    assert plain.authorizations() == {f"Bearer {ADMIN_KEY}"}

    plain.keys.seen.clear()
    flag = tierank(
        "jobs", "--server", plain.address, "--api-key", MEMBER_KEY,
        env={"TIERANK_API_KEY": ADMIN_KEY},
    )  # fmt: skip
    assert flag.returncode == 0, flag.stderr
    assert plain.authorizations() == {f"Bearer {MEMBER_KEY}"}


def test_without_a_key_no_header_is_sent_and_the_servers_hint_is_not_repeated(
    plain: StandIn,
) -> None:
    result = tierank("jobs", "--server", plain.address)
    assert result.returncode == 1
    assert plain.authorizations() == {None}
    assert result.stderr.splitlines() == [f"tierank jobs: UNAUTHENTICATED: {MISSING_KEY_MESSAGE}"]


async def test_python_clients_send_the_key_on_every_call(plain: StandIn) -> None:
    with Client(plain.address, api_key=ADMIN_KEY) as client:
        client.get_job("jobs/x")
        assert [e.sequence for e in client.watch_job("jobs/x")] == [1]
    async with AsyncClient(plain.address, api_key=MEMBER_KEY) as client:
        await client.get_job("jobs/x")
        assert [e.sequence async for e in client.watch_job("jobs/x")] == [1]

    assert plain.keys.seen == [
        ("GetJob", f"Bearer {ADMIN_KEY}"),
        ("WatchJob", f"Bearer {ADMIN_KEY}"),
        ("GetJob", f"Bearer {MEMBER_KEY}"),
        ("WatchJob", f"Bearer {MEMBER_KEY}"),
    ]


# Refusals: one line, a hint, never the key


def test_unauthenticated_is_one_line_with_a_hint_and_never_the_key(plain: StandIn) -> None:
    for command in (["keys", "list"], ["watch", "jobs/x"], ["jobs"]):
        result = tierank(*command, "--server", plain.address, "--api-key", WRONG_KEY)

        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            f"tierank {command[0]}: UNAUTHENTICATED: {UNAUTHENTICATED_MESSAGE}"
            " (pass --api-key or set $TIERANK_API_KEY)"
        ]
        assert_no_secret(result, WRONG_KEY)


def test_a_member_on_an_admin_command_is_told_it_needs_an_admin_key(plain: StandIn) -> None:
    result = tierank("tenants", "list", "--server", plain.address, "--api-key", MEMBER_KEY)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"tierank tenants: PERMISSION_DENIED: {FORBIDDEN_MESSAGE}"
        " (pass an admin key with --api-key or $TIERANK_API_KEY)"
    ]
    assert_no_secret(result, MEMBER_KEY)


def test_a_server_never_reached_does_not_show_the_key() -> None:
    result = tierank(
        "keys", "list", "--server", unused_address(), "--api-key", WRONG_KEY,
        env={"TIERANK_CONNECT_TIMEOUT": "1"},
    )  # fmt: skip
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert "cannot reach" in result.stderr
    assert_no_secret(result, WRONG_KEY)


def test_a_key_that_cannot_be_sent_is_a_usage_error_that_does_not_echo_it(plain: StandIn) -> None:
    bad = "trk_with a space"
    result = tierank("jobs", "--server", plain.address, "--api-key", bad)

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tierank jobs: --api-key must be printable ASCII without spaces (the key is not shown here)"
    ]
    assert_no_secret(result, bad)
    assert plain.keys.seen == []


def test_help_never_shows_the_key_from_the_environment() -> None:
    result = tierank("keys", "create", "--help", env={"TIERANK_API_KEY": ADMIN_KEY})
    assert result.returncode == 0
    assert "TIERANK_API_KEY" in result.stdout
    assert_no_secret(result, ADMIN_KEY)


# TLS


def test_tls_with_a_trusted_ca_from_the_flag_or_the_environment(
    serve: Callable[..., StandIn], pki: Pki
) -> None:
    server = serve(tls_credentials(pki))
    by_flag = admin("keys", "list", "--server", server.address, "--tls-ca", str(pki.ca.cert))
    by_env = admin(
        "keys", "list", "--server", server.address, env={"TIERANK_TLS_CA": str(pki.ca.cert)}
    )

    assert by_flag.returncode == 0, by_flag.stderr
    assert by_env.returncode == 0, by_env.stderr
    assert plain_lines(by_flag.stdout) == plain_lines(by_env.stdout)
    assert server.authorizations() == {f"Bearer {ADMIN_KEY}"}


def test_mutual_tls_with_a_client_certificate(serve: Callable[..., StandIn], pki: Pki) -> None:
    server = serve(tls_credentials(pki, mutual=True))
    ca = ["--server", server.address, "--tls-ca", str(pki.ca.cert)]
    by_flags = admin(
        "usage", *ca, "--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)
    )
    by_env = admin(
        "usage", *ca,
        env={"TIERANK_TLS_CLIENT_CERT": str(pki.client.cert),
             "TIERANK_TLS_CLIENT_KEY": str(pki.client.key)},
    )  # fmt: skip
    without = admin("usage", *ca, env={"TIERANK_CONNECT_TIMEOUT": "1"})

    assert by_flags.returncode == 0, by_flags.stderr
    assert by_env.returncode == 0, by_env.stderr
    assert without.returncode == 1
    assert without.stderr.splitlines() == [
        f"tierank usage: UNAVAILABLE: cannot reach {server.address} (the server closed the"
        " connection: does it need TLS, or a client certificate?)"
    ]


async def test_python_clients_take_pem_paths_or_bytes(
    serve: Callable[..., StandIn], pki: Pki
) -> None:
    server = serve(tls_credentials(pki, mutual=True))
    with Client(
        server.address,
        api_key=ADMIN_KEY,
        tls_ca=str(pki.ca.cert),
        tls_cert=pki.client.cert,
        tls_key=pki.client.key,
    ) as client:
        assert client.get_job("x").name == "jobs/x"
    async with AsyncClient(
        server.address,
        api_key=ADMIN_KEY,
        tls_ca=pki.ca.cert.read_bytes(),
        tls_cert=pki.client.cert.read_bytes(),
        tls_key=pki.client.key.read_bytes(),
    ) as client:
        assert (await client.get_job("y")).name == "jobs/y"
    assert server.authorizations() == {f"Bearer {ADMIN_KEY}"}


def test_an_untrusted_server_certificate_fails_at_once_in_one_line(
    serve: Callable[..., StandIn], pki: Pki
) -> None:
    server = serve(tls_credentials(pki))
    # A server that is still starting is waited for this long: half of it tells "at once" apart
    # from that wait on any machine, a command's start-up included.
    connect_timeout_s = 60
    started = time.monotonic()
    result = admin(
        "keys", "list", "--server", server.address, "--tls-ca", str(pki.other_ca.cert),
        env={"TIERANK_CONNECT_TIMEOUT": str(connect_timeout_s)},
    )  # fmt: skip

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"tierank keys: UNAVAILABLE: cannot reach {server.address} (TLS handshake failed:"
        " CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate)"
    ]
    assert time.monotonic() - started < connect_timeout_s / 2
    assert_no_secret(result, ADMIN_KEY)
    assert server.keys.seen == []


def test_a_plaintext_client_at_a_tls_server_is_told_why(
    serve: Callable[..., StandIn], pki: Pki
) -> None:
    server = serve(tls_credentials(pki))
    result = admin("jobs", "--server", server.address, env={"TIERANK_CONNECT_TIMEOUT": "1"})
    assert result.returncode == 1
    assert "does it need TLS" in result.stderr


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.pem"
    path.write_text("not a certificate\n")
    return path


BAD_TLS_FLAGS: dict[str, Callable[[Pki, Path], tuple[list[str], str]]] = {
    "missing ca": lambda p, t: (
        ["--tls-ca", str(t / "absent.pem")],
        f"cannot read --tls-ca {t / 'absent.pem'}: No such file or directory",
    ),
    "ca is a folder": lambda p, t: (
        ["--tls-ca", str(t)],
        f"cannot read --tls-ca {t}: Is a directory",
    ),
    "ca is garbage": lambda p, t: (
        ["--tls-ca", str(_garbage(t))],
        f"--tls-ca {t / 'garbage.pem'} is not a PEM certificate",
    ),
    "cert without key": lambda p, t: (
        ["--tls-cert", str(p.client.cert)],
        "--tls-key is needed with --tls-cert",
    ),
    "key without cert": lambda p, t: (
        ["--tls-key", str(p.client.key)],
        "--tls-cert is needed with --tls-key",
    ),
    "key is a certificate": lambda p, t: (
        ["--tls-cert", str(p.client.cert), "--tls-key", str(p.client.cert)],
        f"--tls-key {p.client.cert} is not a PEM private key",
    ),
    "key of another certificate": lambda p, t: (
        ["--tls-cert", str(p.client.cert), "--tls-key", str(p.server.key)],
        "--tls-key does not match --tls-cert",
    ),
}


# Every kind of bad file through a job command; the admin commands share the connection code,
# so two kinds stand for them (each case is a process start).
BAD_TLS_CASES = [(["jobs"], name) for name in BAD_TLS_FLAGS] + [
    (["keys", "list"], name) for name in ("missing ca", "key of another certificate")
]


@pytest.mark.parametrize(
    ("command", "case"),
    [(command, BAD_TLS_FLAGS[name]) for command, name in BAD_TLS_CASES],
    ids=[f"{' '.join(command)}-{name}" for command, name in BAD_TLS_CASES],
)
def test_bad_tls_files_are_one_line_usage_errors(
    pki: Pki, tmp_path: Path, case: Callable, command: list[str]
) -> None:
    flags, message = case(pki, tmp_path)
    # Nothing listens there: the files are checked before anything is sent.
    result = admin(*command, "--server", unused_address(), *flags)

    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"tierank {command[0]}: {message}"]
    assert result.stdout == ""


def test_bad_settings_from_the_environment_name_the_variable(tmp_path: Path) -> None:
    absent = tmp_path / "absent.pem"
    for env, message in (
        ({"TIERANK_TLS_CA": str(absent)}, f"cannot read $TIERANK_TLS_CA {absent}: No such file"),
        ({"TIERANK_TLS": "maybe"}, "$TIERANK_TLS must be 1 or 0, not 'maybe'"),
        ({"TIERANK_API_KEY": "two words"}, "$TIERANK_API_KEY must be printable ASCII"),
    ):
        result = tierank("jobs", "--server", unused_address(), env=env)
        assert result.returncode == 2
        [line] = result.stderr.splitlines()
        assert line.startswith(f"tierank jobs: {message}")


def test_the_python_api_names_its_keywords_in_errors(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConnectionSettingsError) as missing:
        Client("127.0.0.1:1", tls_ca=tmp_path / "absent.pem")
    assert str(missing.value) == (
        f"cannot read tls_ca {tmp_path / 'absent.pem'}: No such file or directory"
    )
    with pytest.raises(ConnectionSettingsError) as alone:
        Client("127.0.0.1:1", tls_cert=pki.client.cert)
    assert str(alone.value) == "tls_key is needed with tls_cert"
    with pytest.raises(ConnectionSettingsError) as garbage:
        AsyncClient("127.0.0.1:1", tls_ca=b"garbage")
    assert str(garbage.value) == "tls_ca is not a PEM certificate"
    with pytest.raises(ConnectionSettingsError) as unsendable:
        Client("127.0.0.1:1", api_key="line\nbreak")
    assert "line" not in str(unsendable.value)


# The embedded server stays plaintext and key-free


def test_security_flags_without_server_are_refused(tmp_path: Path) -> None:
    result = tierank("jobs", "--api-key", ADMIN_KEY, "--db", str(tmp_path / "t.db"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tierank jobs: --api-key needs --server (the embedded server is plaintext and needs no key)"
    ]
    assert_no_secret(result, ADMIN_KEY)


def test_embedded_server_ignores_the_servers_auth_and_tls_environment(tmp_path: Path) -> None:
    result = tierank(
        "jobs",
        env={
            "TIERANK_DB": str(tmp_path / "embedded.db"),
            "TIERANK_AUTH": "keys",
            "TIERANK_TLS_CERT": str(tmp_path / "absent.crt"),
            "TIERANK_TLS_KEY": str(tmp_path / "absent.key"),
            "TIERANK_API_KEY": ADMIN_KEY,
            "TIERANK_TLS_CA": str(tmp_path / "absent-ca.crt"),
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no jobs"


# keys


def test_keys_create_prints_the_token_alone_on_stdout(plain: StandIn) -> None:
    result = admin(
        "keys", "create", "--tenant", "ops", "--role", "admin", "--name", "ci",
        "--certificate-subject", "CN=ops", "--server", plain.address,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{NEW_SECRET}\n"
    assert "shown only now and never again" in result.stderr
    assert "keys/0123456789ab (admin of tenant ops)" in result.stderr
    request = plain.only("CreateApiKey")
    assert (request.tenant, request.role) == ("ops", admin_pb2.ROLE_ADMIN)
    assert (request.display_name, request.certificate_subject) == ("ci", "CN=ops")


def test_keys_create_as_json_defaults_to_member(plain: StandIn) -> None:
    result = admin(
        "keys", "create", "--tenant", "team-a", "--format", "json", "--server", plain.address
    )
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["secret"] == NEW_SECRET
    assert created["key"]["role"] == "member"
    assert created["key"]["tenant"] == "team-a"
    assert created["key"]["create_time"] == "2023-11-14T22:13:20Z"
    assert created["key"]["revoke_time"] is None
    assert plain.only("CreateApiKey").role == admin_pb2.ROLE_MEMBER


def test_keys_list_is_a_table_and_all_includes_revoked(plain: StandIn) -> None:
    result = admin("keys", "list", "--server", plain.address)
    with_revoked = admin("keys", "list", "--all", "--tenant", "team-a", "--server", plain.address)

    assert result.returncode == 0, result.stderr
    lines = plain_lines(result.stdout)
    assert lines[0].split() == [
        "key", "id", "tenant", "role", "label", "created", "(UTC)", "revoked", "certificate",
        "subject",
    ]  # fmt: skip
    assert lines[1].split() == ["aaaaaaaaaaaa", "ops", "admin", "ci", "2023-11-14", "22:13"]
    # A label is shown as it is, brackets and all (not read as markup).
    assert "alice [laptop]" in lines[2]
    assert "CN=team-a,O=Example" in lines[2]
    assert len(lines) == 3
    revoked = plain_lines(with_revoked.stdout)[3].split()
    assert revoked == [
        "cccccccccccc",
        "team-a",
        "member",
        "2023-11-14",
        "22:13",
        "2023-11-14",
        "23:13",
    ]
    requests = [r for name, r in plain.requests if name == "ListApiKeys"]
    assert [(r.tenant, r.include_revoked) for r in requests] == [("", False), ("team-a", True)]


@pytest.mark.parametrize("key", ["keys/abcdefabcdef", "abcdefabcdef"])
def test_keys_revoke_takes_a_name_or_an_id(plain: StandIn, key: str) -> None:
    result = admin("keys", "revoke", key, "--server", plain.address)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("keys/abcdefabcdef of tenant team-a: revoked 2023-11-14")
    assert plain.only("RevokeApiKey").name == "keys/abcdefabcdef"


# tenants


def test_tenants_set_sends_only_the_named_limits(plain: StandIn) -> None:
    result = admin(
        "tenants", "set", "team-a", "--max-concurrent-jobs", "4", "--max-watchers", "0",
        "--daily-cost-usd", "2.5", "--clear", "daily-judge-calls", "jobs_per_minute",
        "--allow-server-provider-keys", "no", "--server", plain.address,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    request = plain.only("SetTenant")
    assert request.tenant == "team-a"
    set_limits = {f.name: v for f, v in request.quota.ListFields()}
    assert set_limits == {"max_concurrent_jobs": 4, "max_watchers": 0, "daily_cost_usd": 2.5}
    assert list(request.clear_limits) == ["daily_judge_calls", "jobs_per_minute"]
    assert request.HasField("allow_server_provider_keys")
    assert request.allow_server_provider_keys is False
    shown = result.stdout.splitlines()
    assert shown[0] == "tenants/team-a"
    assert "  server provider keys allowed: no" in shown
    assert any(line.split() == ["max-watchers", "0"] for line in shown)
    assert any(line.split() == ["daily-cost-usd", "$2.5"] for line in shown)
    assert any(line.split() == ["max-candidates", "no", "limit"] for line in shown)


def test_tenants_set_without_allow_leaves_it_unset(plain: StandIn) -> None:
    result = admin("tenants", "set", "team-b", "--server", plain.address)
    assert result.returncode == 0, result.stderr
    request = plain.only("SetTenant")
    assert not request.HasField("allow_server_provider_keys")
    assert not request.HasField("quota")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-candidates", "-1"], "must be a whole number, 0 or more"),
        (["--max-candidates", "many"], "must be a whole number, 0 or more"),
        (["--daily-cost-usd", "nan"], "must be a number, 0 or more"),
        (["--clear", "everything"], "'everything' is not a limit; one of max-concurrent-jobs"),
        (["--max-watchers", "2", "--clear", "max-watchers"], "--max-watchers is both set and"),
        (["--allow-server-provider-keys", "maybe"], "invalid choice: 'maybe'"),
    ],
)
def test_tenants_set_refuses_bad_limits(plain: StandIn, args: list[str], message: str) -> None:
    result = admin("tenants", "set", "team-a", *args, "--server", plain.address)
    assert result.returncode == 2
    assert message in result.stderr
    assert plain.requests == []


def test_tenants_list_and_show(plain: StandIn) -> None:
    listed = admin("tenants", "list", "--server", plain.address)
    shown = admin("tenants", "show", "team-a", "--format", "json", "--server", plain.address)
    missing = admin("tenants", "show", "team-z", "--server", plain.address)

    assert listed.returncode == 0, listed.stderr
    rows = plain_lines(listed.stdout)
    assert rows[1].split()[:2] == ["team-a", "max-concurrent-jobs=4"]
    assert rows[2].split()[:4] == ["team-b", "none", "anthropic,", "openai"]
    tenant = json.loads(shown.stdout)
    assert tenant["name"] == "tenants/team-a"
    assert tenant["quota"]["max_concurrent_jobs"] == 4
    assert tenant["quota"]["daily_cost_usd"] == 2.5
    assert tenant["quota"]["max_watchers"] is None
    assert tenant["provider_keys"] == ["openai"]
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == ["tierank tenants: NOT_FOUND: tenants/team-z not found"]


def _provider_key(address: str, *args: str, stdin: str = "", env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "tierank.client", "tenants", "provider-key", "team-a", "openai",
         *args, "--server", address],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env=cli_environment({"TIERANK_API_KEY": ADMIN_KEY, **(env or {})}),
    )  # fmt: skip


def test_provider_key_is_read_from_stdin_and_never_shown(plain: StandIn) -> None:
    result = _provider_key(plain.address, stdin=f"{PROVIDER_KEY}\n")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tenants/team-a: openai key set; own provider keys: openai"
    ]
    request = plain.only("SetProviderKey")
    assert (request.tenant, request.provider, request.api_key) == ("team-a", "openai", PROVIDER_KEY)
    assert_no_secret(result, PROVIDER_KEY)


def test_provider_key_from_a_variable_or_removed(plain: StandIn) -> None:
    from_env = _provider_key(
        plain.address, "--from-env", "TEAM_A_KEY", env={"TEAM_A_KEY": PROVIDER_KEY}
    )
    removed = _provider_key(plain.address, "--remove")

    assert from_env.returncode == 0, from_env.stderr
    assert removed.returncode == 0, removed.stderr
    assert "openai key removed; own provider keys: none" in removed.stdout
    sent = [r.api_key for name, r in plain.requests if name == "SetProviderKey"]
    assert sent == [PROVIDER_KEY, ""]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no provider key on stdin (--remove removes the tenant's key)"),
        (["--from-env", "TIERANK_TEST_UNSET"], "$TIERANK_TEST_UNSET is not set or empty"),
    ],
)
def test_provider_key_missing_is_a_usage_error(
    plain: StandIn, args: list[str], message: str
) -> None:
    result = _provider_key(plain.address, *args, stdin="  \n")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"tierank tenants: {message}"]
    assert plain.requests == []


def test_provider_key_is_not_an_argument() -> None:
    result = tierank("tenants", "provider-key", "team-a", "openai", PROVIDER_KEY)
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr


# usage


def test_usage_shows_spend_reservations_limits_and_jobs(plain: StandIn) -> None:
    result = admin("usage", "--tenant", "team-a", "--server", plain.address)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == "tenant team-a, today 2025-06-01 (UTC)"
    assert "openai/gpt-4.1-mini" in out and "lexical" in out
    assert any(line.split()[:3] == ["all", "judges", "15"] for line in out.splitlines())
    assert "reserved by calls in flight: 2 calls, 4000 input tokens, $0.0100" in out
    assert "unfinished jobs: 1" in out
    assert any(
        line.split() == ["daily-judge-calls", "100", "(today:", "15", "used,", "2", "reserved)"]
        for line in out.splitlines()
    )
    assert plain.only("GetUsage").tenant == "team-a"


def test_usage_as_json(plain: StandIn) -> None:
    result = admin("usage", "--format", "json", "--server", plain.address)
    usage = json.loads(result.stdout)
    assert usage["tenant"] == "team-a"
    assert [s["judge"] for s in usage["today"]] == ["openai/gpt-4.1-mini", "lexical"]
    assert usage["today"][0]["input_tokens"] == 24000
    assert usage["reserved"]["calls"] == 2
    assert usage["quota"]["daily_judge_calls"] == 100
    assert usage["quota"]["max_candidates"] is None
    assert usage["unfinished_jobs"] == 1
    assert plain.only("GetUsage").tenant == ""


# Where an admin command goes: --server or --db


def test_admin_commands_need_server_or_db() -> None:
    result = tierank("keys", "list")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tierank keys: say where: --server HOST:PORT (or $TIERANK_SERVER) for a running server,"
        " or --db FILE to work on a database with no server running"
    ]


def test_server_and_db_exclude_each_other(plain: StandIn, tmp_path: Path) -> None:
    result = admin("usage", "--server", plain.address, "--db", str(tmp_path / "t.db"))
    assert result.returncode == 2
    # Every command refuses the pair in the same words (test_cli_flags.py).
    assert result.stderr.startswith("tierank usage: --server and --db exclude each other: ")
    assert len(result.stderr.splitlines()) == 1


def test_server_from_the_environment_serves_admin_commands(plain: StandIn) -> None:
    result = admin("tenants", "list", env={"TIERANK_SERVER": plain.address})
    assert result.returncode == 0, result.stderr
    assert "team-b" in result.stdout


# --db: the server's admin tool as a child process. The real one is the server's; this
# stand-in keeps to its contract and records what it was given.

FAKE_ADMIN_TOOL = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    method, flag, db = sys.argv[1:4]
    request = sys.stdin.read()
    with open(Path(db).with_suffix(".calls"), "a") as calls:
        calls.write(json.dumps({"argv": sys.argv[1:], "request": json.loads(request)}) + "\\n")
    if "broken" in db:
        print('{"event": "admin call", "level": "info"}', file=sys.stderr)
        print("tierank: NOT_FOUND: tenant 'team-z' does not exist", file=sys.stderr)
        sys.exit(1)
    if "garbled" in db:
        print("this is not JSON")
        sys.exit(0)
    answers = {
        "CreateApiKey": {"key": {"name": "keys/0123456789ab", "tenant": "ops",
                                 "role": "ROLE_ADMIN", "createTime": "2023-11-14T22:13:20Z"},
                         "secret": "NEW_SECRET"},
        "SetProviderKey": {"name": "tenants/team-a", "providerKeys": ["openai"],
                           "someFieldFromTheFuture": 1},
        "GetUsage": {"tenant": "team-a", "day": "2025-06-01", "unfinishedJobs": "3"},
    }
    print(json.dumps(answers[method]))
    """
).replace("NEW_SECRET", NEW_SECRET)


@pytest.fixture
def direct(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`tierank ARGS` with the admin tool replaced by the stand-in."""
    tool = tmp_path / "fake_admin_tool.py"
    tool.write_text(FAKE_ADMIN_TOOL)
    launcher = (
        "import sys; import tierank.client.commands._admin as admin;"
        f" admin.ADMIN_TOOL_COMMAND = (sys.executable, {str(tool)!r});"
        " from tierank.client.cli import main; sys.exit(main(sys.argv[1:]))"
    )

    def run(*args: str, stdin: str = "", env: dict[str, str] | None = None):
        return subprocess.run(
            [sys.executable, "-c", launcher, *args],
            input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
            env=cli_environment(env),
        )  # fmt: skip

    return run


def tool_calls(db: Path) -> list[dict]:
    return [json.loads(line) for line in db.with_suffix(".calls").read_text().splitlines()]


def test_db_runs_the_admin_tool_with_the_request_as_json_on_stdin(
    direct: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    db = tmp_path / "tierank.db"
    # $TIERANK_SERVER does not stand in the way of an explicit --db.
    result = direct(
        "keys", "create", "--tenant", "ops", "--role", "admin", "--db", str(db),
        env={"TIERANK_SERVER": unused_address()},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{NEW_SECRET}\n"
    assert "keys/0123456789ab (admin of tenant ops)" in result.stderr
    [call] = tool_calls(db)
    assert call["argv"] == ["CreateApiKey", "--db", str(db)]
    request = json_format.ParseDict(call["request"], admin_pb2.CreateApiKeyRequest())
    assert request == admin_pb2.CreateApiKeyRequest(tenant="ops", role=admin_pb2.ROLE_ADMIN)


def test_db_provider_key_travels_on_stdin_not_argv(
    direct: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    db = tmp_path / "tierank.db"
    result = direct(
        "tenants", "provider-key", "team-a", "openai", "--db", str(db), stdin=PROVIDER_KEY
    )

    assert result.returncode == 0, result.stderr
    assert "own provider keys: openai" in result.stdout
    [call] = tool_calls(db)
    assert PROVIDER_KEY not in " ".join(call["argv"])
    assert call["request"]["apiKey"] == PROVIDER_KEY
    assert_no_secret(result, PROVIDER_KEY)


def test_db_usage_renders_like_the_server_path(
    direct: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    result = direct("usage", "--format", "json", "--db", str(tmp_path / "tierank.db"))
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout)
    assert (usage["tenant"], usage["unfinished_jobs"], usage["today"]) == ("team-a", 3, [])


@pytest.mark.parametrize(
    ("db_name", "message"),
    [
        ("broken.db", "NOT_FOUND: tenant 'team-z' does not exist"),
        ("garbled.db", "the admin tool's answer is not a TenantUsage"),
    ],
)
def test_db_failures_are_one_line_exit_1(
    direct: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
    db_name: str,
    message: str,
) -> None:
    result = direct("usage", "--db", str(tmp_path / db_name))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"tierank usage: {message}")


def test_db_refuses_security_flags(
    direct: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    result = direct("keys", "list", "--db", str(tmp_path / "t.db"), "--api-key", ADMIN_KEY)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tierank keys: --api-key needs --server (--db works on the file, with no server)"
    ]
    assert_no_secret(result, ADMIN_KEY)


# End to end, with the real server and its admin tool


def test_a_key_made_on_the_database_works_until_revoked(tmp_path: Path, pki: Pki) -> None:
    db = tmp_path / "tierank.db"
    assert tierank("tenants", "set", "ops", "--db", str(db)).returncode == 0
    made = tierank("keys", "create", "--tenant", "ops", "--role", "operator", "--db", str(db))
    assert made.returncode == 0, made.stderr
    admin_key = made.stdout.strip()
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    with LocalServer(db=db, extra_args=("--auth", "keys", *tls)) as server:
        where = {"TIERANK_SERVER": server.address, "TIERANK_TLS_CA": str(pki.ca.cert)}
        as_admin = {**where, "TIERANK_API_KEY": admin_key}
        assert tierank("tenants", "set", "team-a", env=as_admin).returncode == 0
        member = tierank("keys", "create", "--tenant", "team-a", env=as_admin)
        assert member.returncode == 0, member.stderr
        as_member = {**where, "TIERANK_API_KEY": member.stdout.strip()}

        assert tierank("jobs", env=as_member).returncode == 0
        forbidden = tierank("tenants", "list", env=as_member)
        anonymous = tierank("jobs", env=where)
        listed = tierank("keys", "list", "--tenant", "team-a", "--format", "json", env=as_admin)
        [key] = json.loads(listed.stdout)["keys"]
        revoked = tierank("keys", "revoke", key["name"], env=as_admin)
        refused = tierank("jobs", env=as_member)

    assert forbidden.returncode == 1
    assert "PERMISSION_DENIED" in forbidden.stderr
    assert anonymous.returncode == 1
    assert "UNAUTHENTICATED" in anonymous.stderr
    assert revoked.returncode == 0, revoked.stderr
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"tierank jobs: UNAUTHENTICATED: API key {key['name']} was revoked"
        " (pass --api-key or set $TIERANK_API_KEY)"
    ]
    for result in (forbidden, anonymous, refused):
        assert_no_secret(result, admin_key, as_member["TIERANK_API_KEY"])


def test_keys_create_for_a_tenant_that_does_not_exist_is_refused(tmp_path: Path, pki: Pki) -> None:
    db = tmp_path / "tierank.db"
    direct = tierank("keys", "create", "--tenant", "nosuchtenant", "--db", str(db))
    assert tierank("tenants", "set", "ops", "--db", str(db)).returncode == 0
    made = tierank("keys", "create", "--tenant", "ops", "--role", "operator", "--db", str(db))
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    with LocalServer(db=db, extra_args=("--auth", "keys", *tls)) as server:
        as_operator = {
            "TIERANK_SERVER": server.address,
            "TIERANK_TLS_CA": str(pki.ca.cert),
            "TIERANK_API_KEY": made.stdout.strip(),
        }
        remote = tierank("keys", "create", "--tenant", "nosuchtenant", env=as_operator)
        tenants = tierank("tenants", "list", "--format", "json", env=as_operator)
    for result in (direct, remote):
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr.splitlines()[-1] == (
            "tierank keys: NOT_FOUND: tenants/nosuchtenant not found; an operator creates it"
            " with `tierank tenants set nosuchtenant`"
        )
    # Neither way made the tenant on the side.
    assert [t["name"] for t in json.loads(tenants.stdout)["tenants"]] == ["tenants/ops"]


def test_every_admin_flag_has_help() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
    for command in ("keys", "tenants"):
        actions = next(a for a in commands[command]._actions if isinstance(a.choices, dict))
        for name, subparser in actions.choices.items():
            for action in subparser._actions:
                assert action.help, f"tierank {command} {name} {action.dest} has no help"


def plain_lines(table: str) -> list[str]:
    """A rich SIMPLE_HEAD table's lines without the rule and blank lines."""
    return [line for line in table.splitlines() if line.strip() and set(line.strip()) != {"─"}]
