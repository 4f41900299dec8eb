"""`tools/submit.py --emit k8s`: the PaddleJob against the training-operator's CRD schema (tests/data/kubeflow,
with its origin), the operator's admission rules, and the pod command run on two namespace hosts with the
environment the operator injects."""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from helpers.netns import netns_hosts  # noqa: F401  (fixture)
from helpers.slurm_cluster import hosts_files
from paddledist.submit.cli import main

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
DATA = str(REPO / "dataset" / "digits")
CRD = Path(__file__).resolve().parent / "data" / "kubeflow" / "kubeflow.org_paddlejobs.yaml.gz"
CRD_BLOB = "fbcf3f203798a2945404318c7e8e59a6e92e99fb"
"""git blob id of manifests/base/crds/kubeflow.org_paddlejobs.yaml at training-operator v1.9.0 (see README)."""
DEFAULT_PORT = 36543
"""PaddleJobDefaultPort (pkg/apis/kubeflow.org/v1/paddlepaddle_types.go): used without a port named master."""


def crd_schema() -> dict:
    raw = gzip.decompress(CRD.read_bytes())
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
    assert blob == CRD_BLOB, "tests/data/kubeflow's CRD is not the cited upstream file"
    crd = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 600 KB: libyaml's is 10x faster
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """Unknown fields become errors, as with `kubectl apply --validate=strict` (the API server would otherwise
    drop them silently, so a misspelt key would pass a plain check)."""
    schema = copy.deepcopy(schema)
    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return schema


@functools.lru_cache(maxsize=1)
def validator():
    import jsonschema

    return jsonschema.Draft7Validator(strict(crd_schema()))


def emit(capsys, *args: str) -> list[dict]:
    assert main(["-c", CONFIG, "--emit", "k8s", *args]) == 0, capsys.readouterr().err
    return list(yaml.safe_load_all(capsys.readouterr().out))


def paddle_job(docs: list[dict]) -> dict:
    (job,) = [d for d in docs if d["kind"] == "PaddleJob"]
    return job


def webhook_errors(job: dict) -> list[str]:
    """pkg/webhooks/paddlepaddle/paddlepaddle_webhook.go's validatePaddleJob, for what the schema leaves out."""
    errors = []
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"]) or len(job["metadata"]["name"]) > 63:
        errors.append("metadata.name is not a DNS-1035 label")
    for rtype, spec in job["spec"]["paddleReplicaSpecs"].items():
        containers = spec["template"]["spec"].get("containers") or []
        errors += [f"{rtype}: replica type"] * (rtype not in ("Master", "Worker"))
        errors += [f"{rtype}: container without image" for c in containers if not c.get("image")]
        errors += [f"{rtype}: no container named paddle"] * (not any(c["name"] == "paddle" for c in containers))
    return errors


@pytest.mark.unit
@pytest.mark.parametrize("extra", [[], ["-o", "Global.device=gpu:0,1,2,3", "--namespace", "ml", "--name", "cls-a"]])
def test_manifest_matches_the_crd_schema_and_the_webhook(capsys, extra):
    docs = emit(capsys, "--nodes", "3", "-o", "Train.epochs_iters=2", *extra)
    job = paddle_job(docs)
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator().iter_errors(job)]
    assert errors == [] and webhook_errors(job) == []
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PaddleJob")
    worker = job["spec"]["paddleReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3 and list(job["spec"]["paddleReplicaSpecs"]) == ["Worker"]  # collective mode
    (box,) = worker["template"]["spec"]["containers"]
    assert box["args"] == ["-c", "/etc/paddledist/config.yaml", "-o", "Train.epochs_iters=2", *extra[:2]]
    assert box["resources"] == ({"limits": {"nvidia.com/gpu": 4}} if extra else {"requests": {"cpu": "1"}})
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["data"]["config.yaml"] == Path(CONFIG).read_text()
    volumes = {v["name"]: v for v in worker["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    # paddle's master (what PADDLE_MASTER will name) is not the port the machines' preflight holds
    assert box["ports"] == [{"name": "master", "containerPort": 6171, "protocol": "TCP"}]


@pytest.mark.unit
def test_the_schema_check_catches_broken_manifests(capsys):
    """The check itself: the same manifest with a wrong type, a misspelt or missing key, a bad quantity fails."""
    job = paddle_job(emit(capsys))
    def broken(path, value=None):
        bad = copy.deepcopy(job)
        node = bad
        for key in path[:-1]:
            node = node[key]
        if value is None:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return list(validator().iter_errors(bad))
    worker = ["spec", "paddleReplicaSpecs", "Worker"]
    box = [*worker, "template", "spec", "containers", 0]
    assert not broken([*worker, "replicas"], 3)
    assert broken([*worker, "replicas"], "2")
    assert broken([*worker, "replicaz"], 2)
    assert broken([*box, "name"])
    assert broken([*box, "ports", 0, "containerPort"], "6170")
    assert broken([*box, "resources", "requests", "cpu"], "lots")
    assert webhook_errors(dict(job, metadata={"name": "Paddle_Job"}))


def operator_env(job: dict, index: int, pod_ip: str, secrets: list[dict]) -> dict[str, str]:
    """What the operator and kubelet put in worker `index`'s environment (envvar.go's setPodEnv, collective
    mode), with the container's own env, downward-API fields and Secret keys resolved as kubelet does."""
    name = job["metadata"]["name"]
    (box,) = job["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    ports = [p["containerPort"] for p in box.get("ports", []) if p.get("name") == "master"]
    port = ports[0] if ports else DEFAULT_PORT
    fields = {"status.podIP": pod_ip}
    keys = {(d["metadata"]["name"], k): v for d in secrets for k, v in d["stringData"].items()}

    def value(e: dict) -> str:
        source = e.get("valueFrom", {})
        if "secretKeyRef" in source:
            return keys[source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]]
        return e.get("value") or fields[source["fieldRef"]["fieldPath"]]

    env = {e["name"]: value(e) for e in box.get("env", [])}
    total = sum(spec["replicas"] for spec in job["spec"]["paddleReplicaSpecs"].values())
    env.update(PYTHONUNBUFFERED="1", PADDLE_JOB_ID=name, PADDLE_NNODES=str(total))
    if index == 0:
        env["POD_IP_DUMMY"] = pod_ip
        env["PADDLE_MASTER"] = f"{env['POD_IP_DUMMY']}:{port}"  # kubelet expands $(POD_IP_DUMMY)
    else:
        env["PADDLE_MASTER"] = f"{name}-worker-0:{port}"  # worker 0's headless service name
    return env


def final_digest(rank_log: Path) -> str:
    found = re.findall(r"final parameter digest: ([0-9a-f]{64})", rank_log.read_text())
    assert len(found) == 1, f"{rank_log}: expected one digest line"
    return found[0]


@pytest.mark.multihost
def test_pods_train_together_with_the_operators_environment(capsys, netns_hosts, tmp_path):  # noqa: F811
    """The manifest's pod command on two namespace hosts: the ConfigMap's file where the manifest mounts it,
    the operator's variables (PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID; no rank, no address list) and the
    pod names resolving through each host's own hosts file, as the per-replica services make them resolve.
    Needs the runtime's master-address mode (branch sched)."""
    out = tmp_path / "out"
    docs = emit(capsys, "--nodes", "2", "--workdir", str(REPO), "--config-dir", str(tmp_path / "configmap"),
                "--name", "pdtest", "-o", f"Global.dataset_dir={DATA}", "Train.epochs_iters=1",
                f"Global.output={out}", "Train.peer_timeout=60")
    job = paddle_job(docs)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (tmp_path / "configmap").mkdir()
    for key, text in cm["data"].items():
        (tmp_path / "configmap" / key).write_text(text)
    (box,) = job["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    hosts = netns_hosts(2)
    names = {f"pdtest-worker-{i}": hosts.addresses[i] for i in range(2)}
    procs = {}
    with hosts_files(hosts, names):
        for i in range(2):
            env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH", "LANG")}
            env.update(operator_env(job, i, hosts.addresses[i], [d for d in docs if d["kind"] == "Secret"]))
            argv = [sys.executable if box["command"][0] == "python" else box["command"][0], *box["command"][1:],
                    *box["args"]]
            log = open(tmp_path / f"pod{i}.txt", "w")
            procs[i] = hosts.popen(i, argv, env=env, cwd=box["workingDir"], stdout=log, stderr=log)
        codes = {i: proc.wait(timeout=300) for i, proc in procs.items()}
    logs = {i: (tmp_path / f"pod{i}.txt").read_text() for i in procs}
    for i in procs:
        assert codes[i] == 0, f"pod {i}:\n{logs[i][-4000:]}"
        assert f"this node = node {i} of 2" in logs[i], logs[i][-2000:]
        assert "not authenticated" not in logs[i], "the manifest's Secret should authenticate the machines"
    result = json.loads((out / "train_result.json").read_text())
    assert (result["world_size"], result["done_flag"]) == (2, True)
    logs = sorted(out.glob("**/train.rank*.log"))
    assert len(logs) == 2 and len({final_digest(p) for p in logs}) == 1


@pytest.mark.unit
def test_every_pod_reads_a_new_job_secret_from_the_manifests_secret(capsys):
    docs = emit(capsys, "--nodes", "2")
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (box,) = paddle_job(docs)["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in box["env"] if e["name"] == "PADDLEDIST_JOB_SECRET"]
    value = secret["stringData"][ref["key"]]
    assert ref["name"] == secret["metadata"]["name"] and re.fullmatch(r"[0-9a-f]{64}", value)
    again = [d for d in emit(capsys, "--nodes", "2") if d["kind"] == "Secret"][0]["stringData"][ref["key"]]
    assert again != value  # one secret per job
