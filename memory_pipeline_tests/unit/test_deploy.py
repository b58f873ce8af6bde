"""Deployments as shipped. Kubernetes: the image definition (deploy/Dockerfile) and the values for
Dagster's official Helm chart (deploy/helm/values.yaml). No cluster and no chart here (its values
schema is on no package registry), so the structure the chart reads is asserted explicitly, and
kept in step with the instance config deploy/k8s/dagster.yaml. One machine: the workspace the
webserver and daemon load (deploy/production/workspace.yaml) names the code server that the file's
header and docs/operations.md start (the end-to-end tests deploy it)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from typing import Any

import yaml

from memory_pipeline.lib.settings import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _all(name: str) -> list[str]:
    return [args for word, args in instructions() if word == name]


def test_the_image_installs_the_lock_with_hashes_and_runs_the_code_server_as_a_user():
    steps = instructions()
    assert steps[0][0] == "FROM" and re.match(r"python:3\.11[-.]", steps[0][1]), steps[0]
    assert any("requirements.lock" in c.split() for c in _all("COPY"))
    installs = [shlex.split(cmd) for run in _all("RUN") for cmd in run.split("&&") if "pip" in cmd and "install" in cmd]
    locked = [a for a in installs if "requirements.lock" in a]
    assert locked, installs
    for args in locked:
        assert {"--require-hashes", "--no-deps", "-r"} <= set(args), args
    # Nothing else fetched unchecked: the project itself, without dependencies or an isolated build.
    for args in installs:
        assert "--no-deps" in args, args
    (user,) = _all("USER")  # exactly one switch, after which the server runs
    assert user.split(":")[0] not in ("root", "0")
    assert [w for w, _ in steps].index("USER") > max(i for i, (w, _) in enumerate(steps) if w == "RUN")
    (entry,) = _all("ENTRYPOINT")
    assert json.loads(entry) == ["dagster", "api", "grpc"]
    (cmd,) = _all("CMD")
    module = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    assert json.loads(cmd)[:2] == ["-m", module]
    env = " ".join(_all("ENV"))
    assert "MEMORY_DATA_DIR=" in env and "DAGSTER_HOME=/opt/dagster/dagster_home" in env


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _walk(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _walk(v, f"{path}[{i}]")]
    return [(path, node)]


def test_the_helm_values_deploy_the_code_location_with_secrets_by_reference_only():
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text(encoding="utf-8"))
    instance = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text(encoding="utf-8"))
    launcher = instance["run_launcher"]["config"]
    dockerfile_cmd = json.loads(_all("CMD")[0])

    user = values["dagster-user-deployments"]
    assert user["enabled"] is True and user["enableSubchart"] is True
    (code,) = user["deployments"]
    assert set(code) >= {"name", "image", "dagsterApiGrpcArgs", "port", "envConfigMaps", "envSecrets"}
    assert set(code["image"]) == {"repository", "tag", "pullPolicy"} and code["image"]["tag"] != "latest"
    assert code["dagsterApiGrpcArgs"] == dockerfile_cmd[:2] and code["port"] == int(dockerfile_cmd[-1])
    assert code["envConfigMaps"] == [{"name": n} for n in launcher["env_config_maps"]]
    assert code["envSecrets"] == [{"name": n} for n in launcher["env_secrets"]]
    assert code["podSecurityContext"]["runAsNonRoot"] is True and code["podSecurityContext"]["runAsUser"] != 0

    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert k8s["jobNamespace"] == launcher["job_namespace"]
    assert k8s["envConfigMaps"] == code["envConfigMaps"] and k8s["envSecrets"] == code["envSecrets"]

    pg = values["postgresql"]
    assert pg["enabled"] is False and pg["postgresqlHost"] and pg["postgresqlDatabase"]
    assert values["generatePostgresqlPasswordSecret"] is False and values["global"]["postgresqlSecretName"]
    assert values["global"]["dagsterHome"] == launcher["dagster_home"]

    for path, value in _walk(values):
        leaf = path.rsplit(".", 1)[-1].lower()
        if isinstance(value, str) and any(word in leaf for word in ("password", "apikey", "api_key", "token")):
            raise AssertionError(f"values.yaml: {path} holds a secret inline")
        if isinstance(value, str):
            assert not re.search(r"://[^/\s]*:[^/\s]*@", value), f"values.yaml: {path} is a URL with a password"
            assert not re.search(r"sk-[A-Za-z0-9]{8,}", value), f"values.yaml: {path} looks like an API key"


def test_one_machines_workspace_names_the_code_server_its_header_and_the_operations_page_start():
    path = DEPLOY / "production" / "workspace.yaml"
    text = path.read_text(encoding="utf-8")
    (entry,) = yaml.safe_load(text)["load_from"]
    server = entry["grpc_server"]
    module = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    wanted = {"-m": module, "-h": server["host"], "-p": str(server["port"]), "--location-name": server["location_name"]}
    operations = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    shown = [line.lstrip("# ") for line in text.splitlines() if "api grpc" in line]
    shown += [line for line in operations.splitlines() if "dagster api grpc" in line and "-w" not in line]
    started = [shlex.split(line[line.index("dagster api grpc") :]) for line in shown if "--location-name" in line]
    assert len(started) == 2, shown  # the file's header and the page's command
    for args in started:
        assert args[:3] == ["dagster", "api", "grpc"]
        options = dict(zip(args[3::2], args[4::2], strict=True))
        assert options == wanted, (options, wanted)
    assert f"-w {path.relative_to(REPO_ROOT)}" in operations  # the webserver and the daemon load it
