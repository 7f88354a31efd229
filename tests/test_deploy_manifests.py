"""deploy/ runs tierank with API keys and TLS, every secret from a Secret, as one server on SQLite
or as several replicas on PostgreSQL. Every Kubernetes manifest is validated against the
Kubernetes API schemas that kubernetes-validate ships (offline), the kustomizations are rendered
with kubectl where it is installed, the compose files are read with PyYAML (and resolved by
`docker compose config` where a compose v2 CLI is installed: it needs no daemon), the image's
entrypoint runs under sh, and the probe script runs against real TLS servers on loopback."""

from __future__ import annotations

import base64
import os
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
K8S_MIGRATE = K8S / "migrate"  # the migration Job, run by hand (migrate.sh)
K8S_FIRST_ADMIN_KEY = K8S_SQLITE / "first-admin-key"  # one-off pod on the SQLite volume
KUSTOMIZATIONS = (K8S, K8S_SQLITE, K8S_MTLS, K8S_MIGRATE, K8S_FIRST_ADMIN_KEY)
# The one place the image is named (a kustomize Component every kustomization uses).
K8S_IMAGE = K8S / "image"
MIGRATE_JOB = K8S_MIGRATE / "migrate-job.yaml"
MIGRATE_SCRIPT = K8S / "migrate.sh"
CREATE_SECRETS = K8S / "create-secrets.sh"
FIRST_ADMIN_KEY = K8S_FIRST_ADMIN_KEY / "first-admin-key.yaml"
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


# How deploy/README.md and the compose files state the oldest Compose they are written for.
COMPOSE_MINIMUM = re.compile(r"Docker Compose v(\d+)\.(\d+) or newer")


def stated_compose_minimum(text: str) -> tuple[int, int]:
    found = {(int(m[0]), int(m[1])) for m in COMPOSE_MINIMUM.findall(" ".join(text.split()))}
    assert len(found) == 1, f"one stated minimum Compose version, not {sorted(found)}"
    return found.pop()


def compose_cli() -> list[str] | None:
    """A compose command line (the docker plugin or a standalone binary) at least as new as the
    stated minimum, if one is here."""
    minimum = stated_compose_minimum((DEPLOY / "README.md").read_text())
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(
            [*command, "version", "--short"], capture_output=True, text=True, timeout=30
        )
        version = re.match(r"v?(\d+)\.(\d+)", done.stdout.strip())
        if done.returncode == 0 and version and tuple(map(int, version.groups())) >= minimum:
            return command
    return None


def test_the_compose_files_state_the_compose_version_they_need():
    minimum = stated_compose_minimum((DEPLOY / "README.md").read_text())
    for path in (COMPOSE, COMPOSE_REPLICAS):
        assert stated_compose_minimum(path.read_text()) == minimum, path.name
    # The replicas' project is named in the file (a top-level `name:`), which compose 1.x
    # refuses: the minimum must be a Compose v2.
    assert "name" in compose(COMPOSE_REPLICAS) and minimum >= (2, 0)


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
        pytest.skip("no compose command line as new as deploy/README.md's stated minimum")
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
    # Run by hand before a rollout: a Job's pod template cannot be changed in place.
    assert not [r for r in kustomization(K8S)["resources"] if "migrate" in r]
    assert "migrate.sh" in MIGRATE_JOB.read_text()


def containers_of(manifests: list[Manifest]) -> list[Manifest]:
    return [c for m in manifests if "template" in m.get("spec", {}) for c in container_list(m)]


def container_list(workload: Manifest) -> list[Manifest]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_manifest_names_the_image_that_the_image_component_sets():
    (image,) = kustomization(K8S_IMAGE)["images"]
    assert kustomization(K8S_IMAGE)["kind"] == "Component"
    assert image["name"] == "tierank" and image["newTag"] != "latest"
    for path in manifest_files():
        for found in containers_of(load_all(path.read_text())):
            # Never :latest, whose default pull policy (Always) would pull Docker Hub's
            # unrelated `tierank` wherever the operator forgot to set the image.
            assert found["image"] == image["name"], f"{path.name}: {found['image']}"
            assert found["imagePullPolicy"] == "IfNotPresent", path.name
    for folder in (K8S, K8S_MIGRATE, K8S_FIRST_ADMIN_KEY):
        assert kustomization(folder)["components"] == [os.path.relpath(K8S_IMAGE, folder)], folder


@needs_kubectl
def test_every_kustomization_renders_the_operators_image():
    (image,) = kustomization(K8S_IMAGE)["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    for folder in KUSTOMIZATIONS:
        rendered = containers_of(render(folder))
        assert rendered and {c["image"] for c in rendered} == {wanted}, folder


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


# The one-step scripts of deploy/README.md, with a stand-in `kubectl` that records its calls,
# makes the Secrets with the real kubectl (client-side, no cluster) and keeps what is applied.

# A pipe's two kubectl run at once: each call's line is appended in one write, so that lines
# of the two never interleave.
FAKE_KUBECTL = """#!/bin/sh
line=$(printf '%s\\037' "$@"); printf '%s\\n' "$line" >> "$KUBECTL_CALLS"
case "$1" in
  create) exec "$REAL_KUBECTL" "$@" ;;
  apply) if [ "$2" = "-f" ]; then { cat; echo ---; } >> "$KUBECTL_APPLIED"; fi ;;
  get) printf '%s' "$JOB_CONDITIONS" ;;
  logs) echo "migration 3 failed: relation exists" ;;
esac
"""


@dataclass(frozen=True)
class Kubectl:
    bin_dir: Path
    calls: Path
    applied: Path

    def run(
        self, script: Path, *args: str, stdin: str = "", **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", str(script), *args],
            input=stdin,
            env={
                "PATH": f"{self.bin_dir}:/usr/bin:/bin",
                "KUBECTL_CALLS": str(self.calls),
                "KUBECTL_APPLIED": str(self.applied),
                "REAL_KUBECTL": shutil.which("kubectl") or "kubectl",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )

    def commands(self) -> list[list[str]]:
        text = self.calls.read_text() if self.calls.exists() else ""
        return [line.split("\x1f")[:-1] for line in text.splitlines()]

    def secrets(self) -> dict[str, Manifest]:
        text = self.applied.read_text() if self.applied.exists() else ""
        return {m["metadata"]["name"]: m for m in load_all(text)}


@pytest.fixture
def kubectl(tmp_path: Path) -> Kubectl:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(FAKE_KUBECTL)
    fake.chmod(0o755)
    return Kubectl(bin_dir, tmp_path / "calls", tmp_path / "applied.yaml")


@pytest.fixture
def operator_files(tmp_path: Path) -> Path:
    """deploy/secrets/ as README.md has the operator make it (mutual TLS included)."""
    folder = tmp_path / "secrets"
    folder.mkdir()
    ca = make_ca(folder, "ca")
    server = issue(ca, folder, "tierank", server=True, san=("tierank",))
    (folder / "tls.crt").write_bytes(server.cert.read_bytes())
    (folder / "tls.key").write_bytes(server.key.read_bytes())
    (folder / "ca.crt").write_bytes(ca.cert.read_bytes())
    (folder / "secret-key").write_text("sealing-value\n")
    (folder / "openai-api-key").write_text("provider-value")
    (folder / "anthropic-api-key").write_text("")  # a provider this deployment does not use
    client_ca = make_ca(folder, "client-ca")
    probe = issue(client_ca, folder, "tierank-probe", server=False)
    (folder / "client-ca.crt").write_bytes(client_ca.cert.read_bytes())
    (folder / "tierank-probe.crt").write_bytes(probe.cert.read_bytes())
    (folder / "tierank-probe.key").write_bytes(probe.key.read_bytes())
    return folder


def secrets_read(manifests: list[Manifest]) -> set[str]:
    """The Secrets that rendered manifests read, optional or not."""
    names: set[str] = set()
    for workload in manifests:
        if "template" not in workload.get("spec", {}):
            continue
        spec = pod_spec(workload)
        names |= {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        for found in container_list(workload):
            names |= {e["secretRef"]["name"] for e in found.get("envFrom", [])}
            names |= {
                e["valueFrom"]["secretKeyRef"]["name"]
                for e in found.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})
            }
    return names


def decoded(secret: Manifest) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


@needs_kubectl
def test_create_secrets_makes_every_secret_the_manifests_read_in_one_step(
    kubectl: Kubectl, operator_files: Path
):
    url = "postgresql://tierank:db-password@db.example.internal:5432/tierank"
    done = kubectl.run(CREATE_SECRETS, stdin=url + "\n", TIERANK_SECRETS_DIR=str(operator_files))
    assert done.returncode == 0, done.stderr
    made = kubectl.secrets()
    read = secrets_read(render(K8S_MTLS)) | secrets_read(render(K8S_MIGRATE))
    assert set(made) == read
    assert made["tierank-tls"]["type"] == "kubernetes.io/tls"
    assert set(made["tierank-tls"]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert decoded(made["tierank-database"]) == {"TIERANK_DB": url}
    assert decoded(made["tierank-secret-key"]) == {"TIERANK_SECRET_KEY": "sealing-value\n"}
    assert decoded(made["tierank-provider-keys"]) == {"OPENAI_API_KEY": "provider-value"}
    assert made["tierank-probe-cert"]["type"] == "kubernetes.io/tls"
    # Made client-side and applied, so a second run replaces them; the URL and its password
    # never appear on a command line.
    assert all(
        c[-3:] == ["--dry-run=client", "-o", "yaml"] for c in kubectl.commands() if c[0] == "create"
    )
    assert "db-password" not in kubectl.calls.read_text()


@needs_kubectl
def test_create_secrets_for_sqlite_asks_for_no_database(kubectl: Kubectl, operator_files: Path):
    (operator_files / "client-ca.crt").unlink()  # no mutual TLS either
    done = kubectl.run(CREATE_SECRETS, "--sqlite", TIERANK_SECRETS_DIR=str(operator_files))
    assert done.returncode == 0, done.stderr
    made = set(kubectl.secrets())
    assert made == {"tierank-tls", "tierank-secret-key", "tierank-provider-keys"}
    assert made <= secrets_read(render(K8S_SQLITE))


def test_create_secrets_names_a_missing_file_and_makes_nothing(kubectl: Kubectl, tmp_path: Path):
    done = kubectl.run(CREATE_SECRETS, TIERANK_SECRETS_DIR=str(tmp_path))
    assert done.returncode == 1
    assert "tls.crt is missing or empty" in done.stderr
    assert kubectl.commands() == []


@pytest.mark.parametrize(("conditions", "status"), [("Complete", 0), ("FailureTarget Failed", 1)])
def test_migrate_runs_the_job_with_the_operators_image_and_reports_its_end(
    kubectl: Kubectl, conditions: str, status: int
):
    done = kubectl.run(MIGRATE_SCRIPT, JOB_CONDITIONS=conditions)
    assert done.returncode == status, done.stderr
    commands = kubectl.commands()
    assert commands[:2] == [
        ["delete", "job", "tierank-migrate", "--ignore-not-found"],
        ["apply", "-k", f"{K8S}/migrate"],
    ]
    assert commands[2][:3] == ["get", "job", "tierank-migrate"]
    if status:
        assert commands[-1] == ["logs", "job/tierank-migrate"]
        assert "migration 3 failed" in done.stderr


def test_the_readme_builds_and_pushes_the_image_and_has_one_step_for_secrets_and_migration():
    readme = " ".join((DEPLOY / "README.md").read_text().split())
    assert "docker build -f deploy/Dockerfile -t registry." in readme and "docker push" in readme
    assert "deploy/k8s/image/kustomization.yaml" in readme
    assert "deploy/k8s/create-secrets.sh" in readme and "deploy/k8s/migrate.sh" in readme
    for script in (CREATE_SECRETS, MIGRATE_SCRIPT):
        assert os.access(script, os.X_OK), script.name
        assert subprocess.run(["sh", "-n", str(script)], timeout=30).returncode == 0
