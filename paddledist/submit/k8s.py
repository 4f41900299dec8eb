"""`--emit k8s`: a ConfigMap holding the config, a Secret holding a new job secret (written readable by its
owner only), and a Kubeflow PaddleJob (training-operator, kubeflow.org/v1).

Collective mode (Worker replicas only): the operator gives every pod PADDLE_MASTER (worker 0's address and
the container port named `master`), PADDLE_NNODES and PADDLE_JOB_ID, but no rank; the training command meets
there. The manifest adds POD_IP from the downward API, so each pod knows its own address. The `master` port
is Train.port + 1 (paddle's master), since the job's etcd holds Train.port on the same host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import yaml

from paddledist.cluster.auth import SECRET_ENV, new_secret
from paddledist.errors import UserError
from paddledist.submit import JobSpec, dense_ids

DEFAULT_IMAGE = "paddledist:latest"
"""An image built from the checkout (docs/multi_machine.md shows the Dockerfile lines); change with --image."""
DEFAULT_WORKDIR = "/workspace/paddledist"
"""Where the image holds the checkout (tools/train.py, configs/, dataset/)."""
DEFAULT_CONFIG_DIR = "/etc/paddledist"
"""Where the ConfigMap is mounted in each pod."""
CONFIG_FILE = "config.yaml"
ACCELERATOR_RESOURCES = {"gpu": "nvidia.com/gpu"}
"""Extended-resource names of the device plugins; other kinds need --accelerator-resource."""
SECRET_KEY = "job-secret"
"""The key of the job secret in the Secret object."""
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class K8sOptions:
    image: str = DEFAULT_IMAGE
    """Container image holding paddle and the checkout at `workdir`."""
    workdir: str = DEFAULT_WORKDIR
    """The checkout inside the image; the container's working folder (relative config paths mean it)."""
    config_dir: str = DEFAULT_CONFIG_DIR
    """Mount point of the ConfigMap (the config file is <config_dir>/config.yaml)."""
    name: Optional[str] = None
    """PaddleJob name; default: Train.job_id made a DNS-1035 label."""
    namespace: Optional[str] = None
    """metadata.namespace of both objects, when given."""
    accelerator_resource: Optional[str] = None
    """Extended resource for the cards of Global.device (default per ACCELERATOR_RESOURCES)."""


def job_name(job: JobSpec, opts: K8sOptions) -> str:
    """A DNS-1035 label (the operator's webhook refuses others): pods are <name>-worker-<i>."""
    if opts.name is not None:
        name = opts.name
    else:
        name = re.sub(r"[^a-z0-9-]+", "-", job.job_id.lower()).strip("-")
    # "-worker-NNN" and the ConfigMap's "-config" must still fit in 63 characters
    if not _DNS1035.match(name) or len(name) > 48:
        raise UserError(f"PaddleJob name {name!r} (from {'--name' if opts.name else 'Train.job_id'}) must be at "
                        "most 48 lower-case letters, digits and '-', starting with a letter; pass --name NAME")
    return name


def resources(job: JobSpec, opts: K8sOptions) -> dict:
    """Cards per pod as limits (the device plugin's count), or one CPU request per worker process."""
    count = dense_ids(job.device, "Kubernetes")
    if not job.device.accelerator:
        return {"requests": {"cpu": str(count)}}
    name = opts.accelerator_resource or ACCELERATOR_RESOURCES.get(job.device.kind)
    if name is None:
        raise UserError(f"Global.device={job.device.kind}: no known Kubernetes resource for {job.device.kind} "
                        "cards; pass --accelerator-resource <the device plugin's resource name>")
    return {"limits": {name: count}}


def container(job: JobSpec, opts: K8sOptions) -> dict:
    """The one container the operator looks for: named `paddle`, with the port named `master`."""
    args = ["-c", f"{opts.config_dir.rstrip('/')}/{CONFIG_FILE}"]
    for item in job.overrides:
        args += ["-o", item]
    return {
        "name": "paddle",
        "image": opts.image,
        "workingDir": opts.workdir,
        "command": ["python", f"{opts.workdir.rstrip('/')}/tools/train.py"],
        "args": args,
        "ports": [{"name": "master", "containerPort": job.port + 1, "protocol": "TCP"}],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": {"name": secret_name(job, opts),
                                                                    "key": SECRET_KEY}}}],
        "resources": resources(job, opts),
        "volumeMounts": [{"name": "config", "mountPath": opts.config_dir, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }


def paddle_job(job: JobSpec, opts: K8sOptions) -> dict:
    name = job_name(job, opts)
    # Data-loader workers pass batches through /dev/shm; a container's default 64 MiB is too small.
    volumes = [{"name": "config", "configMap": {"name": f"{name}-config"}},
               {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    worker = {
        "replicas": job.nodes,
        # A failed machine stops every machine of the job (exit code != 0); restarting one pod alone would
        # wait for peers that have gone. Rerun the job, resuming from a checkpoint, instead.
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [container(job, opts)], "volumes": volumes}},
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": metadata(name, opts),
            "spec": {"runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
                     "paddleReplicaSpecs": {"Worker": worker}}}


def secret_name(job: JobSpec, opts: K8sOptions) -> str:
    return f"{job_name(job, opts)}-secret"


def job_secret(job: JobSpec, opts: K8sOptions, value: str) -> dict:
    """The Secret every pod reads PADDLEDIST_JOB_SECRET from (the machines' control connections, docs/security.md)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(secret_name(job, opts), opts),
            "type": "Opaque", "stringData": {SECRET_KEY: value}}


def config_map(job: JobSpec, opts: K8sOptions) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(f"{job_name(job, opts)}-config", opts),
            "data": {CONFIG_FILE: job.config_text}}


def metadata(name: str, opts: K8sOptions) -> dict:
    labels = {"app.kubernetes.io/name": "paddledist"}
    return {"name": name, "labels": labels, **({"namespace": opts.namespace} if opts.namespace else {})}


def render(job: JobSpec, opts: K8sOptions) -> str:
    """Both objects as one YAML stream, for `kubectl apply -f`."""
    header = (f"# Written by `tools/submit.py --emit k8s` for {job.config_path!r}; apply with `kubectl apply -f`.\n"
              "# Needs Kubeflow's training-operator (PaddleJob, kubeflow.org/v1).\n")
    docs = [config_map(job, opts), job_secret(job, opts, new_secret()), paddle_job(job, opts)]
    return header + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line text (the shipped config) as a readable `|` block."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)
