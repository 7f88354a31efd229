"""deploy/ runs tierank with API keys and TLS, every secret from a Secret: the image, compose file
and Kubernetes manifests are read as text (PyYAML is no dependency of the project), the image's
entrypoint runs under sh, and the probe script runs against real TLS servers on loopback."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

# The certificate factory is shared test support, in this folder.
sys.path.insert(0, str(Path(__file__).parent))

from certs import Ca, Issued, issue, make_ca

from tierank.client import LocalServer

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
HEALTHCHECK = DEPLOY / "healthcheck.py"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
DEPLOYMENT = DEPLOY / "k8s" / "tierank.yaml"
MTLS_PATCH = DEPLOY / "k8s-mtls" / "client-ca.yaml"
FIRST_ADMIN_KEY = DEPLOY / "k8s" / "first-admin-key.yaml"
# What the operator makes for compose.yaml; git- and docker-ignored, so never scanned.
OPERATOR_SECRETS = DEPLOY / "secrets"

KEY_MATERIAL = {
    "PEM block": re.compile(r"BEGIN |PRIVATE KEY"),
    "OpenAI or Anthropic key": re.compile(r"(?<![A-Za-z])sk-"),
    "tierank API key": re.compile(r"trk_"),
    "Fernet key": re.compile(r"[A-Za-z0-9_-]{43}="),
}


def deploy_files() -> list[Path]:
    return sorted(
        path
        for path in DEPLOY.rglob("*")
        if path.is_file()
        and OPERATOR_SECRETS not in path.parents
        and "__pycache__" not in path.parts
    )


def config(path: Path) -> str:
    """The file without its comments, so that only what the tools read is checked."""
    lines = (re.sub(r"(^|\s)#.*", "", line).rstrip() for line in path.read_text().splitlines())
    return "\n".join(line for line in lines if line)


def env_values(manifest: str) -> dict[str, str]:
    return dict(re.findall(r"\{name: (\w+), value: ([^}]+)\}", manifest))


def mounts(manifest: str) -> dict[str, tuple[str, bool]]:
    """Volume name -> (mount path, read-only)."""
    found = re.findall(r"\{name: ([\w-]+), mountPath: ([^,}]+)(, readOnly: true)?\}", manifest)
    return {name: (path, bool(read_only)) for name, path, read_only in found}


def secret_volumes(manifest: str) -> dict[str, str]:
    """Volume name -> the Secret it is made from."""
    return dict(re.findall(r"- name: ([\w-]+)\n\s+secret:\n\s+secretName: ([\w-]+)", manifest))


def probe_commands(manifest: str) -> dict[str, list[str]]:
    found = re.findall(r"(\w+Probe):\n\s+exec:\n\s+command: \[([^\]]+)\]", manifest)
    return {probe: re.split(r"[,\s]+", command.strip()) for probe, command in found}


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def secret_file(manifest: str, path: str) -> str:
    """The Secret a file path in the container comes from, checking it is mounted read-only."""
    volumes = secret_volumes(manifest)
    for volume, (mount_path, read_only) in mounts(manifest).items():
        if PurePosixPath(path).parent == PurePosixPath(mount_path) and volume in volumes:
            assert read_only, f"{mount_path} is mounted writable"
            return volumes[volume]
    raise AssertionError(f"{path} is not in a mounted Secret")


def test_nothing_under_deploy_holds_key_material():
    files = deploy_files()
    assert HEALTHCHECK in files and DEPLOYMENT in files
    for path in files:
        text = path.read_text()
        for what, pattern in KEY_MATERIAL.items():
            assert not pattern.search(text), f"{path.relative_to(DEPLOY)} holds a {what}"


def test_operator_secrets_are_kept_out_of_git_and_of_the_image():
    assert "secrets/" in config(DEPLOY / ".gitignore").splitlines()
    assert "deploy/secrets" in config(DEPLOY / "Dockerfile.dockerignore").splitlines()


def test_nothing_deployed_serves_without_keys():
    for path in [
        DEPLOY / "Dockerfile",
        DEPLOY / "compose.yaml",
        ENTRYPOINT,
        *DEPLOY.glob("k8s*/*.yaml"),
    ]:
        text = config(path)
        assert not re.search(r"auth.{0,3}none|allow.unauthenticated", text, re.I), path


def test_the_image_requires_keys_runs_unprivileged_and_carries_the_probe():
    dockerfile = config(DEPLOY / "Dockerfile")
    assert re.search(r"^ENV [^\n]*(\\\n[^\n]*)*TIERANK_AUTH=keys", dockerfile, re.M)
    final_stage = dockerfile.split("\nFROM ")[-1]
    assert final_stage.rsplit("\nUSER ", 1)[1].startswith("tierank")
    assert "COPY --chmod=0755 deploy/healthcheck.py /usr/local/bin/tierank-healthcheck" in (
        final_stage
    )
    assert 'ENTRYPOINT ["tierank-entrypoint"]' in final_stage
    assert HEALTHCHECK.read_text().startswith("#!/usr/bin/env python3\n")


def test_compose_takes_tls_files_and_secrets_from_compose_secrets():
    compose = config(DEPLOY / "compose.yaml")
    assert re.search(r"^ {6}TIERANK_AUTH: keys$", compose, re.M)
    environment = dict(re.findall(r"^ {6}(\w+): (\S+)$", compose, re.M))
    used = set(re.findall(r"^ {6}- (\w+)$", compose, re.M))
    defined = dict(re.findall(r"^ {2}(\w+):\n {4}file: (\S+)$", compose, re.M))
    secret_paths = {
        name: value for name, value in environment.items() if value.startswith("/run/secrets/")
    }
    assert {"TIERANK_TLS_CERT", "TIERANK_TLS_KEY", "TIERANK_SECRET_KEY_FILE"} <= set(secret_paths)
    for provider in ("OPENAI", "ANTHROPIC", "GEMINI"):
        assert f"{provider}_API_KEY_FILE" in secret_paths
    # Anything named like a secret is a path to one, never a value or a ${...} from the shell.
    for name, value in environment.items():
        if re.search(r"KEY|SECRET|TOKEN|PASSWORD", name):
            assert name in secret_paths, f"{name}: {value}"
    for path in secret_paths.values():
        secret = PurePosixPath(path).name
        assert secret in used, f"the service does not mount {secret}"
        assert defined[secret].startswith("./secrets/"), secret
    healthcheck = re.search(r"test: \[(.+)\]", compose)
    assert healthcheck is not None
    command = [word.strip('" ') for word in healthcheck.group(1).split(",")]
    assert command[:2] == ["CMD", "tierank-healthcheck"]
    assert PurePosixPath(option(command, "--ca")).name in used


def test_kubernetes_serves_keys_and_tls_from_read_only_secrets():
    manifest = config(DEPLOYMENT)
    env = env_values(manifest)
    assert env["TIERANK_AUTH"] == "keys"
    assert secret_file(manifest, env["TIERANK_TLS_CERT"]) == "tierank-tls"
    assert secret_file(manifest, env["TIERANK_TLS_KEY"]) == "tierank-tls"
    assert re.search(
        r"- name: TIERANK_SECRET_KEY\n\s+valueFrom:\n\s+secretKeyRef:\n\s+name: tierank-secret-key"
        r"\n\s+key: TIERANK_SECRET_KEY\n\s+optional: true",
        manifest,
    )
    assert re.search(r"secretRef:\n\s+name: tierank-provider-keys\n\s+optional: true", manifest)
    # The files are group-readable by fsGroup, the server's group, and by nobody else.
    assert re.search(r"secretName: tierank-tls\n\s+defaultMode: 0440", manifest)
    assert "fsGroup: 10001" in manifest and "runAsUser: 10001" in manifest
    # SQLite has one writer: one replica, and never an old and a new pod side by side.
    assert "replicas: 1" in manifest and "type: Recreate" in manifest


def test_kubernetes_probes_exec_the_healthcheck_over_tls():
    manifest = config(DEPLOYMENT)
    assert "grpc:" not in manifest  # the kubelet's grpc probe cannot speak TLS
    probes = probe_commands(manifest)
    assert set(probes) == {"readinessProbe", "livenessProbe"}
    for command in probes.values():
        assert command[0] == "tierank-healthcheck"
        assert secret_file(manifest, option(command, "--ca")) == "tierank-tls"
        assert option(command, "--server-name") == "tierank"  # the Service's name


def test_the_mutual_tls_overlay_gives_the_server_a_client_ca_and_the_probes_a_certificate():
    patch = config(MTLS_PATCH)
    base_ca = option(probe_commands(config(DEPLOYMENT))["livenessProbe"], "--ca")
    env = env_values(patch)
    assert secret_file(patch, env["TIERANK_TLS_CLIENT_CA"]) == "tierank-client-ca"
    probes = probe_commands(patch)
    assert set(probes) == {"readinessProbe", "livenessProbe"}
    for command in probes.values():
        assert command[0] == "tierank-healthcheck"
        assert secret_file(patch, option(command, "--cert")) == "tierank-probe-cert"
        assert secret_file(patch, option(command, "--key")) == "tierank-probe-cert"
        # The server's certificate is still the base's, and so is the CA the probe trusts.
        assert option(command, "--ca") == base_ca


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_mutual_tls_overlay_merges_into_the_deployment():
    built = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "k8s-mtls")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert built.count("kind: Deployment") == 1
    for expected in (
        "value: /etc/tierank/client-ca/ca.crt",
        "value: /etc/tierank/tls/tls.crt",
        "secretName: tierank-client-ca",
        "secretName: tierank-probe-cert",
        "secretName: tierank-tls",
        "- /etc/tierank/probe/tls.key",
    ):
        assert expected in built, expected
    assert built.count("- tierank-healthcheck") == 2


def test_the_first_admin_key_pod_only_holds_the_volume():
    job = config(FIRST_ADMIN_KEY)
    assert "kind: Job" in job and "claimName: tierank-data" in job
    # The key is made by `kubectl exec`, so its token never reaches the pod's log.
    assert re.search(r'command: \["sleep", "\d+"\]', job)
    assert "keys create" not in job
    assert re.search(r"activeDeadlineSeconds: \d+", job)
    assert "keys create --db /data/tierank.db" in FIRST_ADMIN_KEY.read_text()


# The image's entrypoint, with a stand-in `tierank` that shows what it was given.


@pytest.fixture
def fake_tierank(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "tierank"
    fake.write_text("#!/bin/sh\nprintf 'arg=%s\\n' \"$@\"\nenv\n")
    fake.chmod(0o755)
    return bin_dir


def run_entrypoint(bin_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ENTRYPOINT), "--shutdown-grace", "20"],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_entrypoint_turns_secret_files_into_the_servers_environment(tmp_path, fake_tierank):
    (tmp_path / "secret-key").write_text("sealing-value\n")
    (tmp_path / "openai").write_text("")  # a provider this deployment does not use
    done = run_entrypoint(
        fake_tierank,
        {
            "TIERANK_SECRET_KEY_FILE": str(tmp_path / "secret-key"),
            "OPENAI_API_KEY_FILE": str(tmp_path / "openai"),
        },
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line[4:] for line in lines if line.startswith("arg=")] == [
        "serve",
        "--shutdown-grace",
        "20",
    ]
    env = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("arg="))
    assert env["TIERANK_SECRET_KEY"] == "sealing-value"
    assert "OPENAI_API_KEY" not in env
    assert not [name for name in env if name.endswith("_FILE")]


def test_entrypoint_stops_when_a_named_secret_file_is_missing(tmp_path, fake_tierank):
    done = run_entrypoint(fake_tierank, {"TIERANK_SECRET_KEY_FILE": str(tmp_path / "absent")})
    assert done.returncode != 0
    assert done.stdout == ""  # the server never started without its key
    assert "absent" in done.stderr


# The probe script against real servers: TLS with keys, and mutual TLS.


@dataclass(frozen=True)
class Pki:
    server_ca: Ca
    other_ca: Ca
    probe: Issued
    stranger: Issued  # a client certificate from a CA the server does not trust


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    server_ca = make_ca(folder, "server-ca")
    client_ca = make_ca(folder, "client-ca")
    other_ca = make_ca(folder, "other-ca")
    return Pki(
        server_ca,
        other_ca,
        probe=issue(client_ca, folder, "tierank-probe", server=False),
        stranger=issue(other_ca, folder, "tierank-probe", server=False),
    )


def serve_tls(folder: Path, pki: Pki, *extra: str) -> Iterator[str]:
    # Like the Kubernetes certificate: it names the Service, not the address the probe dials.
    server = issue(pki.server_ca, folder, "tierank", server=True, san=("tierank",))
    process = LocalServer(
        db=folder / "tierank.db",
        extra_args=(
            "--auth",
            "keys",
            "--tls-cert",
            str(server.cert),
            "--tls-key",
            str(server.key),
            "--log-level",
            "warning",
            *extra,
        ),
    )
    address = process.start()
    try:
        yield address
    finally:
        assert process.stop() == 0  # SIGTERM to its PID: drained and exited cleanly


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    yield from serve_tls(tmp_path_factory.mktemp("tls"), pki)


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    client_ca = pki.probe.ca
    yield from serve_tls(tmp_path_factory.mktemp("mtls"), pki, "--tls-client-ca", str(client_ca))


def healthcheck(address: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), "--address", address, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_healthcheck_passes_against_a_serving_tls_server_with_keys(tls_server, pki):
    done = healthcheck(tls_server, "--ca", pki.server_ca.cert, "--server-name", "tierank")
    assert (done.returncode, done.stderr) == (0, "")


def test_healthcheck_checks_the_name_in_the_servers_certificate(tls_server, pki):
    done = healthcheck(tls_server, "--ca", pki.server_ca.cert)  # 127.0.0.1 is not "tierank"
    assert done.returncode == 1
    assert done.stderr.startswith(f"tierank-healthcheck: {tls_server}: UNAVAILABLE")


def test_healthcheck_refuses_a_server_its_ca_did_not_sign(tls_server, pki):
    done = healthcheck(tls_server, "--ca", pki.other_ca.cert, "--server-name", "tierank")
    assert done.returncode == 1 and "UNAVAILABLE" in done.stderr


def test_healthcheck_fails_on_a_closed_port(pki):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    done = healthcheck(address, "--ca", pki.server_ca.cert, "--timeout", "5")
    assert done.returncode == 1
    assert done.stderr.startswith(f"tierank-healthcheck: {address}: UNAVAILABLE")


def test_healthcheck_names_a_missing_ca_file(tmp_path):
    done = healthcheck("127.0.0.1:1", "--ca", tmp_path / "ca.crt")
    assert done.returncode == 1
    assert f"cannot read {tmp_path / 'ca.crt'}" in done.stderr


def test_healthcheck_over_mutual_tls_needs_a_certificate_the_server_trusts(mtls_server, pki):
    trusted = ("--ca", pki.server_ca.cert, "--server-name", "tierank")
    with_probe_cert = healthcheck(
        mtls_server, *trusted, "--cert", pki.probe.cert, "--key", pki.probe.key
    )
    assert (with_probe_cert.returncode, with_probe_cert.stderr) == (0, "")
    assert healthcheck(mtls_server, *trusted).returncode == 1
    stranger = healthcheck(
        mtls_server, *trusted, "--cert", pki.stranger.cert, "--key", pki.stranger.key
    )
    assert stranger.returncode == 1
