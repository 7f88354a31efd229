"""deploy/ runs tierank with API keys and TLS, every secret from a Secret, as one server on SQLite
or as several replicas on PostgreSQL. Every Kubernetes manifest is validated against the
Kubernetes API schemas that kubernetes-validate ships (offline), the kustomizations are rendered
with kubectl where it is installed, the compose files are read with PyYAML (and resolved by
`docker compose config` where a compose v2 CLI is installed: it needs no daemon), the image's
entrypoint runs under sh, and the probe script runs against real TLS servers on loopback."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import grpc
import kubernetes_validate
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# The certificate factory is shared test support, in this folder.
sys.path.insert(0, str(Path(__file__).parent))

from certs import Ca, Issued, issue, make_ca

from tierank.client import LocalServer

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
HEALTHCHECK = DEPLOY / "healthcheck.py"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
COMPOSE = DEPLOY / "compose.yaml"
COMPOSE_REPLICAS = DEPLOY / "compose.replicas.yaml"
HAPROXY = DEPLOY / "haproxy.cfg"
K8S = DEPLOY / "k8s"  # several replicas on PostgreSQL
K8S_SQLITE = DEPLOY / "k8s-sqlite"  # overlay: one replica on SQLite
K8S_MTLS = DEPLOY / "k8s-mtls"  # overlay: mutual TLS
KUSTOMIZATIONS = (K8S, K8S_SQLITE, K8S_MTLS)
MIGRATE_JOB = K8S / "migrate-job.yaml"
FIRST_ADMIN_KEY = K8S_SQLITE / "first-admin-key.yaml"
# What the operator makes for the compose files; git- and docker-ignored, so never scanned.
OPERATOR_SECRETS = DEPLOY / "secrets"
# The oldest Kubernetes the manifests are for (a PodDisruptionBudget's
# unhealthyPodEvictionPolicy is GA from 1.31), and the newest whose schemas the package ships.
KUBERNETES_VERSIONS = ("1.31", kubernetes_validate.latest_version())

KEY_MATERIAL = {
    "PEM block": re.compile(r"BEGIN |PRIVATE KEY"),
    "OpenAI or Anthropic key": re.compile(r"(?<![A-Za-z])sk-"),
    "tierank API key": re.compile(r"trk_"),
    "Fernet key": re.compile(r"[A-Za-z0-9_-]{43}="),
}
SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD")

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl")

Manifest = dict[str, Any]


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


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


# Kubernetes: the manifests as the API server would read them.


def load_all(text: str) -> list[Manifest]:
    return [document for document in yaml.safe_load_all(text) if document]


def kustomization(folder: Path) -> Manifest:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def manifest_files() -> list[Path]:
    """Every file of whole resources: not a kustomization, nor a patch one lists."""
    patches = {
        folder / patch["path"]
        for folder in KUSTOMIZATIONS
        for patch in kustomization(folder).get("patches", [])
    }
    return sorted(
        path
        for folder in KUSTOMIZATIONS
        for path in folder.glob("*.yaml")
        if path.name != "kustomization.yaml" and path not in patches
    )


def validate(manifest: Manifest, version: str) -> None:
    """Valid for that Kubernetes version's API schema. Strict: an unknown field (a typo) fails
    too, as `kubectl apply` would refuse it."""
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(map(str, error.path))
        name = f"{manifest['kind']} {manifest['metadata']['name']}"
        # Only the point: the error's own text carries the whole schema.
        raise AssertionError(f"{name}: {where}: {error.message}") from None


def render(folder: Path) -> list[Manifest]:
    built = subprocess.run(
        ["kubectl", "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return load_all(built.stdout)


def the(manifests: list[Manifest], kind: str) -> Manifest:
    (found,) = [manifest for manifest in manifests if manifest["kind"] == kind]
    return found


def kinds(manifests: list[Manifest]) -> list[str]:
    return sorted(manifest["kind"] for manifest in manifests)


def pod_spec(workload: Manifest) -> Manifest:
    return workload["spec"]["template"]["spec"]


def container(workload: Manifest) -> Manifest:
    (only,) = pod_spec(workload)["containers"]
    return only


def env(workload: Manifest) -> dict[str, Manifest]:
    return {variable["name"]: variable for variable in container(workload).get("env", [])}


def secret_ref(variable: Manifest) -> tuple[str, str, bool]:
    """(Secret, key, optional) of an environment variable that must come from a Secret."""
    ref = variable["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"], ref.get("optional", False)


def secret_file(workload: Manifest, path: str) -> str:
    """The Secret a file path in the container comes from, checking it is mounted read-only and
    readable by the pod's group only."""
    spec = pod_spec(workload)
    secrets = {v["name"]: v["secret"] for v in spec.get("volumes", []) if "secret" in v}
    for mount in container(workload)["volumeMounts"]:
        if PurePosixPath(path).parent == PurePosixPath(mount["mountPath"]):
            secret = secrets[mount["name"]]
            assert mount.get("readOnly"), f"{mount['mountPath']} is mounted writable"
            assert secret["defaultMode"] == 0o440
            return secret["secretName"]
    raise AssertionError(f"{path} is not in a mounted Secret")


def probes(workload: Manifest) -> dict[str, list[str]]:
    return {
        name: probe["exec"]["command"]
        for name, probe in container(workload).items()
        if name.endswith("Probe")
    }


# Compose: the files as PyYAML reads them (anchors and merge keys resolved).


def compose(path: Path) -> Manifest:
    return yaml.safe_load(path.read_text())


def servers(project: Manifest) -> dict[str, Manifest]:
    """The tierank servers: the services that run the image's healthcheck."""
    return {
        name: service
        for name, service in project["services"].items()
        if service.get("healthcheck", {}).get("test", [])[1:2] == ["tierank-healthcheck"]
    }


def secret_path(project: Manifest, service: Manifest, path: str) -> str:
    """The file under deploy/secrets/ that a /run/secrets path in the container comes from."""
    assert PurePosixPath(path).parent == PurePosixPath("/run/secrets"), path
    secret = PurePosixPath(path).name
    assert secret in service["secrets"], f"the service does not mount {secret}"
    source = project["secrets"][secret]["file"]
    assert source.startswith("./secrets/"), source
    return source


def check_secrets_come_from_files(project: Manifest, service: Manifest) -> None:
    # Anything named like a secret is a path to one, never a value or a ${...} from the shell.
    for name, value in service.get("environment", {}).items():
        if SECRET_NAME.search(name):
            secret_path(project, service, value)


def published(project: Manifest) -> list[str]:
    return [port for service in project["services"].values() for port in service.get("ports", [])]


def compose_cli() -> list[str] | None:
    """A compose v2 command line (the docker plugin or a standalone binary), if one is here."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(
            [*command, "version", "--short"], capture_output=True, text=True, timeout=30
        )
        major = re.match(r"v?(\d+)\.", done.stdout.strip())
        if done.returncode == 0 and major and int(major.group(1)) >= 2:
            return command
    return None


def test_nothing_under_deploy_holds_key_material():
    files = deploy_files()
    assert {HEALTHCHECK, COMPOSE_REPLICAS, HAPROXY, MIGRATE_JOB} <= set(files)
    for path in files:
        text = path.read_text()
        for what, pattern in KEY_MATERIAL.items():
            assert not pattern.search(text), f"{path.relative_to(DEPLOY)} holds a {what}"


def test_operator_secrets_are_kept_out_of_git_and_of_the_image():
    assert "secrets/" in config(DEPLOY / ".gitignore").splitlines()
    assert "deploy/secrets" in config(DEPLOY / "Dockerfile.dockerignore").splitlines()


def test_nothing_deployed_serves_without_keys():
    for path in [DEPLOY / "Dockerfile", COMPOSE, COMPOSE_REPLICAS, ENTRYPOINT, *manifest_files()]:
        text = config(path)
        assert not re.search(r"auth.{0,3}none|allow.unauthenticated", text, re.I), path
    for path in (COMPOSE, COMPOSE_REPLICAS):
        for server in servers(compose(path)).values():
            assert server["environment"]["TIERANK_AUTH"] == "keys"


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


# Compose.


@pytest.mark.parametrize("path", [COMPOSE, COMPOSE_REPLICAS], ids=lambda path: path.name)
def test_compose_servers_take_tls_files_and_secrets_from_compose_secrets(path):
    project = compose(path)
    assert servers(project)
    for service in project["services"].values():
        check_secrets_come_from_files(project, service)
    for server in servers(project).values():
        environment = server["environment"]
        for name in ("TIERANK_TLS_CERT", "TIERANK_TLS_KEY", "TIERANK_SECRET_KEY_FILE"):
            secret_path(project, server, environment[name])
        for provider in ("OPENAI", "ANTHROPIC", "GEMINI"):
            secret_path(project, server, environment[f"{provider}_API_KEY_FILE"])
        command = server["healthcheck"]["test"]
        assert command[:2] == ["CMD", "tierank-healthcheck"]
        assert "--alive" not in command  # healthy means SERVING
        secret_path(project, server, option(command, "--ca"))
    # Only the host itself reaches what compose publishes.
    assert all(port.startswith("127.0.0.1:") for port in published(project))


def test_compose_single_server_keeps_its_sqlite_volume():
    project = compose(COMPOSE)
    (server,) = servers(project).values()
    assert "tierank-data:/data" in server["volumes"]
    assert "TIERANK_DB" not in server["environment"]  # the image's /data/tierank.db
    assert "127.0.0.1:50051:50051" in server["ports"]


def test_compose_replicas_share_one_postgres_database_migrated_before_they_start():
    project = compose(COMPOSE_REPLICAS)
    replicas = servers(project)
    services = project["services"]
    assert len(replicas) == 3
    postgres, migrate = services["postgres"], services["migrate"]

    assert postgres["image"].startswith("postgres:")
    password = secret_path(project, postgres, postgres["environment"]["POSTGRES_PASSWORD_FILE"])
    volume, data = postgres["volumes"][0].split(":")
    assert volume in project["volumes"] and data == "/var/lib/postgresql/data"
    assert "pg_isready" in postgres["healthcheck"]["test"]
    assert "ports" not in postgres  # reached by the replicas only

    database = migrate["environment"]["TIERANK_DB"]
    assert urlsplit(database).scheme == "postgresql"
    assert urlsplit(database).hostname == "postgres"
    assert urlsplit(database).password is None  # it comes from a secret file
    assert secret_path(project, migrate, migrate["environment"]["PGPASSWORD_FILE"]) == password
    assert migrate["command"] == ["db", "migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["build"]["dockerfile"] == "deploy/Dockerfile"

    for name, replica in replicas.items():
        environment = replica["environment"]
        assert environment["TIERANK_DB"] == database, name
        assert secret_path(project, replica, environment["PGPASSWORD_FILE"]) == password
        assert replica["image"] == migrate["image"] and "build" not in replica
        assert replica["pull_policy"] == "never"
        assert replica["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
        assert "volumes" not in replica  # nothing of a replica's own outlives it
        assert not [port for port in replica.get("ports", []) if port.endswith(":50051")]


def test_compose_replicas_have_one_address_that_passes_tls_through():
    project = compose(COMPOSE_REPLICAS)
    lb = project["services"]["lb"]
    assert lb["ports"] == ["127.0.0.1:50051:50051"]
    assert set(lb["depends_on"]) == set(servers(project))
    (mounted,) = lb["configs"]
    assert project["configs"][mounted["source"]]["file"] == f"./{HAPROXY.name}"

    haproxy = config(HAPROXY)
    assert re.search(r"^\s+mode tcp$", haproxy, re.M)  # never terminates TLS
    assert not re.search(r"\b(ssl|crt)\b", haproxy)
    assert re.findall(r"^\s+bind (\S+)", haproxy, re.M) == [":50051"]
    backends = re.findall(r"^\s+server (\S+) (\S+)", haproxy, re.M)
    assert backends == [(name, f"{name}:50051") for name in servers(project)]


@pytest.mark.parametrize("path", [COMPOSE, COMPOSE_REPLICAS], ids=lambda path: path.name)
def test_compose_resolves_each_file_without_a_daemon(path):
    command = compose_cli()
    if command is None:
        pytest.skip("no compose v2 command line (docker compose or docker-compose)")
    done = subprocess.run(
        [*command, "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    resolved = yaml.safe_load(done.stdout)  # JSON is YAML
    assert set(resolved["services"]) == set(compose(path)["services"])
    environments = [resolved["services"][name]["environment"] for name in servers(compose(path))]
    assert all(environment == environments[0] for environment in environments)


# Kubernetes.


@pytest.mark.parametrize("path", manifest_files(), ids=lambda path: str(path.relative_to(DEPLOY)))
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_kubernetes_manifest_is_valid_for_the_api(path, version):
    manifests = load_all(path.read_text())
    assert manifests
    for manifest in manifests:
        validate(manifest, version)


@needs_kubectl
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda folder: folder.name)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_kustomization_renders_manifests_valid_for_the_api(folder, version):
    for manifest in render(folder):
        validate(manifest, version)


def base() -> list[Manifest]:
    return load_all((K8S / "tierank.yaml").read_text())


def test_kubernetes_runs_several_replicas_that_roll_one_at_a_time():
    manifests = base()
    assert kinds(manifests) == ["Deployment", "PodDisruptionBudget", "Service"]
    deployment = the(manifests, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert not [v for v in pod_spec(deployment)["volumes"] if "persistentVolumeClaim" in v]
    # SIGTERM drains for --shutdown-grace; the kubelet's SIGKILL must come later.
    grace = float(option(container(deployment)["args"], "--shutdown-grace"))
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] > grace
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    budget = the(manifests, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"] == labels
    assert budget["spec"]["maxUnavailable"] == 1
    assert the(manifests, "Service")["spec"]["selector"] == labels


def test_kubernetes_takes_the_database_keys_and_tls_from_secrets():
    deployment = the(base(), "Deployment")
    variables = env(deployment)
    assert variables["TIERANK_AUTH"]["value"] == "keys"
    assert secret_ref(variables["TIERANK_DB"]) == ("tierank-database", "TIERANK_DB", False)
    assert secret_file(deployment, variables["TIERANK_TLS_CERT"]["value"]) == "tierank-tls"
    assert secret_file(deployment, variables["TIERANK_TLS_KEY"]["value"]) == "tierank-tls"
    assert secret_ref(variables["TIERANK_SECRET_KEY"]) == (
        "tierank-secret-key",
        "TIERANK_SECRET_KEY",
        True,
    )
    assert container(deployment)["envFrom"] == [
        {"secretRef": {"name": "tierank-provider-keys", "optional": True}}
    ]
    # The Secret files are group-readable by fsGroup, the server's group, and by nobody else.
    security = pod_spec(deployment)["securityContext"]
    assert security["fsGroup"] == 10001 and security["runAsUser"] == 10001
    for name, variable in variables.items():
        if SECRET_NAME.search(name) and "value" in variable:
            assert variable["value"].startswith("/etc/tierank/"), name  # a path, not a value


def test_kubernetes_readiness_wants_serving_and_liveness_only_an_answer():
    deployment = the(base(), "Deployment")
    commands = probes(deployment)
    assert set(commands) == {"startupProbe", "readinessProbe", "livenessProbe"}
    for command in commands.values():
        assert command[0] == "tierank-healthcheck"  # the kubelet's grpc probe has no TLS
        assert secret_file(deployment, option(command, "--ca")) == "tierank-tls"
        assert option(command, "--server-name") == "tierank"  # the Service's name
    # A database outage makes every replica NOT_SERVING: out of the Service, never restarted.
    assert "--alive" not in commands["readinessProbe"]
    assert "--alive" in commands["livenessProbe"] and "--alive" in commands["startupProbe"]


def test_the_migration_job_migrates_the_deployments_database_with_its_image():
    (job,) = load_all(MIGRATE_JOB.read_text())
    deployment = the(base(), "Deployment")
    assert job["kind"] == "Job"
    assert container(job)["args"] == ["db", "migrate"]
    assert container(job)["image"] == container(deployment)["image"]
    assert env(job)["TIERANK_DB"] == env(deployment)["TIERANK_DB"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] > 0
    # Applied by hand before a rollout: a Job's pod template cannot be changed in place.
    assert MIGRATE_JOB.name not in kustomization(K8S)["resources"]


def test_the_sqlite_overlay_runs_one_replica_on_a_volume():
    patches = [patch["path"] for patch in kustomization(K8S_SQLITE)["patches"]]
    deployment, budget = load_all((K8S_SQLITE / patches[0]).read_text())
    assert deployment["spec"]["replicas"] == 1
    # SQLite has one writer: never an old and a new pod side by side.
    assert deployment["spec"]["strategy"] == {"type": "Recreate", "rollingUpdate": None}
    assert budget["kind"] == "PodDisruptionBudget" and budget["$patch"] == "delete"


@needs_kubectl
def test_the_sqlite_overlay_renders_without_the_database_secret():
    manifests = render(K8S_SQLITE)
    assert kinds(manifests) == ["Deployment", "PersistentVolumeClaim", "Service"]
    deployment = the(manifests, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "TIERANK_DB" not in env(deployment)  # the image's /data/tierank.db
    claim = the(manifests, "PersistentVolumeClaim")["metadata"]["name"]
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
    assert volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == claim
    assert secret_file(deployment, env(deployment)["TIERANK_TLS_KEY"]["value"]) == "tierank-tls"


def test_the_mutual_tls_overlay_gives_the_server_a_client_ca_and_the_probes_a_certificate():
    patches = [patch["path"] for patch in kustomization(K8S_MTLS)["patches"]]
    (patch,) = load_all((K8S_MTLS / patches[0]).read_text())
    # The patch alone lacks the base's volumes: judge its mounts merged with them.
    merged = the(base(), "Deployment")
    pod_spec(merged)["volumes"] += pod_spec(patch)["volumes"]
    container(merged)["volumeMounts"] += container(patch)["volumeMounts"]
    assert secret_file(merged, env(patch)["TIERANK_TLS_CLIENT_CA"]["value"]) == "tierank-client-ca"
    base_probes = probes(the(base(), "Deployment"))
    patched = probes(patch)
    assert set(patched) == set(base_probes)
    for name, command in patched.items():
        assert secret_file(merged, option(command, "--cert")) == "tierank-probe-cert"
        assert secret_file(merged, option(command, "--key")) == "tierank-probe-cert"
        # Otherwise the base's probe: the same server certificate, CA and mode.
        without_client_certificate = command[: command.index("--cert")]
        assert without_client_certificate == base_probes[name]


@needs_kubectl
def test_the_mutual_tls_overlay_merges_into_the_deployment():
    manifests = render(K8S_MTLS)
    assert kinds(manifests) == ["Deployment", "PodDisruptionBudget", "Service"]
    deployment = the(manifests, "Deployment")
    variables = env(deployment)
    assert secret_file(deployment, variables["TIERANK_TLS_CLIENT_CA"]["value"]) == (
        "tierank-client-ca"
    )
    assert secret_ref(variables["TIERANK_DB"])[0] == "tierank-database"
    for command in probes(deployment).values():
        assert secret_file(deployment, option(command, "--key")) == "tierank-probe-cert"


def test_the_first_admin_key_pod_only_holds_the_sqlite_volume():
    (job,) = load_all(FIRST_ADMIN_KEY.read_text())
    assert job["kind"] == "Job"
    (volume,) = pod_spec(job)["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == "tierank-data"
    # The key is made by `kubectl exec`, so its token never reaches the pod's log.
    command = container(job)["command"]
    assert command[0] == "sleep" and "keys" not in command
    assert job["spec"]["activeDeadlineSeconds"] > 0
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


@dataclass(frozen=True)
class Started:
    args: list[str]
    env: dict[str, str]


def run_entrypoint(bin_dir: Path, env: dict[str, str], *args: str) -> Started:
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    return Started(
        args=[line[4:] for line in lines if line.startswith("arg=")],
        env=dict(
            line.split("=", 1) for line in lines if "=" in line and not line.startswith("arg=")
        ),
    )


def test_entrypoint_turns_secret_files_into_the_servers_environment(tmp_path, fake_tierank):
    (tmp_path / "secret-key").write_text("sealing-value\n")
    (tmp_path / "openai").write_text("")  # a provider this deployment does not use
    (tmp_path / "postgres-password").write_text("database-value\n")
    started = run_entrypoint(
        fake_tierank,
        {
            "TIERANK_SECRET_KEY_FILE": str(tmp_path / "secret-key"),
            "OPENAI_API_KEY_FILE": str(tmp_path / "openai"),
            "PGPASSWORD_FILE": str(tmp_path / "postgres-password"),
        },
        "--shutdown-grace",
        "20",
    )
    assert started.args == ["serve", "--shutdown-grace", "20"]
    assert started.env["TIERANK_SECRET_KEY"] == "sealing-value"
    assert started.env["PGPASSWORD"] == "database-value"
    assert "OPENAI_API_KEY" not in started.env
    assert not [name for name in started.env if name.endswith("_FILE")]


def test_entrypoint_runs_another_command_with_the_same_secrets(tmp_path, fake_tierank):
    (tmp_path / "postgres-password").write_text("database-value")
    environment = {"PGPASSWORD_FILE": str(tmp_path / "postgres-password")}
    started = run_entrypoint(fake_tierank, environment, "db", "migrate")
    assert started.args == ["db", "migrate"]  # what compose and the migration Job run
    assert started.env["PGPASSWORD"] == "database-value"
    assert run_entrypoint(fake_tierank, environment).args == ["serve"]


def test_entrypoint_stops_when_a_named_secret_file_is_missing(tmp_path, fake_tierank):
    done = subprocess.run(
        ["sh", str(ENTRYPOINT)],
        env={"PATH": f"{fake_tierank}:/usr/bin:/bin", "PGPASSWORD_FILE": str(tmp_path / "absent")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert done.stdout == ""  # the server never started without its password
    assert "absent" in done.stderr


# The probe script against real servers: TLS with keys, mutual TLS, and NOT_SERVING.


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


def server_certificate(folder: Path, pki: Pki) -> Issued:
    # Like the Kubernetes certificate: it names the Service, not the address the probe dials.
    return issue(pki.server_ca, folder, "tierank", server=True, san=("tierank",))


def serve_tls(folder: Path, pki: Pki, *extra: str) -> Iterator[str]:
    server = server_certificate(folder, pki)
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


@pytest.fixture(scope="module")
def not_serving_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    """A TLS server whose standard health service answers NOT_SERVING, as a tierank server's
    does while its database is unreachable."""
    certificate = server_certificate(tmp_path_factory.mktemp("not-serving"), pki)
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    with ThreadPoolExecutor(max_workers=2) as pool:
        server = grpc.server(pool)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        credentials = grpc.ssl_server_credentials(
            [(certificate.key.read_bytes(), certificate.cert.read_bytes())]
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
        server.start()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            server.stop(None).wait()


def healthcheck(address: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), "--address", address, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("mode", [(), ("--alive",)], ids=["serving", "alive"])
def test_healthcheck_passes_against_a_serving_tls_server_with_keys(tls_server, pki, mode):
    done = healthcheck(tls_server, *mode, "--ca", pki.server_ca.cert, "--server-name", "tierank")
    assert (done.returncode, done.stderr) == (0, "")


def test_healthcheck_alive_passes_where_the_server_is_not_serving(not_serving_server, pki):
    trusted = ("--ca", pki.server_ca.cert, "--server-name", "tierank")
    not_ready = healthcheck(not_serving_server, *trusted)
    assert not_ready.returncode == 1
    assert not_ready.stderr == f"tierank-healthcheck: {not_serving_server}: NOT_SERVING\n"
    alive = healthcheck(not_serving_server, "--alive", *trusted)
    assert (alive.returncode, alive.stderr) == (0, "")


@pytest.mark.parametrize("mode", [(), ("--alive",)], ids=["serving", "alive"])
def test_healthcheck_checks_the_name_in_the_servers_certificate(tls_server, pki, mode):
    done = healthcheck(tls_server, *mode, "--ca", pki.server_ca.cert)  # not "tierank"
    assert done.returncode == 1
    assert done.stderr.startswith(f"tierank-healthcheck: {tls_server}: UNAVAILABLE")


@pytest.mark.parametrize("mode", [(), ("--alive",)], ids=["serving", "alive"])
def test_healthcheck_refuses_a_server_its_ca_did_not_sign(tls_server, pki, mode):
    done = healthcheck(tls_server, *mode, "--ca", pki.other_ca.cert, "--server-name", "tierank")
    assert done.returncode == 1 and "UNAVAILABLE" in done.stderr


@pytest.mark.parametrize("mode", [(), ("--alive",)], ids=["serving", "alive"])
def test_healthcheck_fails_on_a_closed_port(pki, mode):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    done = healthcheck(address, *mode, "--ca", pki.server_ca.cert, "--timeout", "5")
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
    assert healthcheck(mtls_server, "--alive", *trusted).returncode == 1
    stranger = healthcheck(
        mtls_server, *trusted, "--cert", pki.stranger.cert, "--key", pki.stranger.key
    )
    assert stranger.returncode == 1
