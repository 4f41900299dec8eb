"""The typed config schema: one frozen dataclass per YAML section.

Every key of a PaddleX image-classification module config is accepted unchanged; paddledist's own
additions are marked "(paddledist)". Defaults live here and nowhere else.
Precedence: schema defaults < YAML file < `-o` overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

MODES = ("check_dataset", "train", "evaluate", "export", "predict", "doctor")


@dataclass(frozen=True)
class SyncWay:
    """A gradient sync (engine/sync/): the paddle_internals capabilities it relies on, and where it runs."""
    needs: tuple = ()
    cpu_only: bool = True
    one_machine: bool = False


GRAD_SYNCS = {"reducer": SyncWay(cpu_only=False),
              "shm": SyncWay(("numpy_view", "grad_hook", "give_grad", "share_buffer"), one_machine=True),
              "bucket": SyncWay(("numpy_view", "grad_hook", "give_grad", "global_all_reduce")),
              "flat": SyncWay(("numpy_view", "give_grad"))}
"""Train.grad_sync's ways, read by validation, the sync policy (engine/sync/policy.py) and engine/sync's build."""
GRAD_SYNC = ("auto", *GRAD_SYNCS)
GRAD_COMPRESSION = ("none", "bf16", "fp16")
"""Train.grad_compression values besides null (YAML and -o read `none` as null; a quoted "none" stays a string)."""
OPTIMIZERS = ("Momentum", "AdamW")
LR_SCHEDULERS = ("cosine", "piecewise")
LAUNCH_STYLES = ("ips", "master")
CONTROL_PLANES = ("etcd",)
ELASTIC_BATCH = ("keep", "scale_lr")


@dataclass(frozen=True)
class GlobalConfig:
    model: str = "LeNet"
    """Model name from the registry (PaddleX names: ResNet18, MobileNetV3_small_x1_0, ..., LeNet)."""
    mode: Any = "train"
    """One of check_dataset, train, evaluate, export, predict, doctor (tools/doctor.py: a check of the cluster), or a list of them run in order."""
    dataset_dir: str = "./dataset/digits"
    """Dataset folder; its format (ClsDataset, CIFAR-10 batches, synthetic) is recognised from its layout."""
    device: str = "cpu"
    """Devices on each machine: cpu, cpu:0,1 (two CPU worker processes), gpu:0,1,2,3."""
    output: str = "./output"
    """Folder for results, checkpoints, logs and the saved config.yaml."""
    seed: int = 42
    """(paddledist) Seed for data order, augmentation and initialisation, 0 to 2147483647."""
    allow_outside_paths: bool = False
    """(paddledist) Let train.txt/val.txt list absolute paths or paths with `..` that leave Global.dataset_dir (refused by default: a list from elsewhere could read any file)."""
    export_with_pir: bool = False
    """(PaddleX) Export paddle's PIR program (inference.json); off, the legacy inference.pdmodel is written only when FLAGS_json_format_model=0 too (PaddleX 3.7's rule)."""


@dataclass(frozen=True)
class ConvertConfig:
    enable: bool = False
    """Convert the dataset from another annotation format first."""
    src_dataset_type: Optional[str] = None
    """Source annotation format when convert is enabled."""


@dataclass(frozen=True)
class SplitConfig:
    enable: bool = False
    """Re-split train+val with a fixed seed (original lists are kept as backups)."""
    train_percent: Optional[int] = None
    """Share of samples for training, in percent."""
    val_percent: Optional[int] = None
    """Share of samples for validation, in percent."""


@dataclass(frozen=True)
class CheckDatasetConfig:
    convert: ConvertConfig = field(default_factory=ConvertConfig)
    """Dataset format conversion."""
    split: SplitConfig = field(default_factory=SplitConfig)
    """Dataset re-splitting."""


@dataclass(frozen=True)
class TrainConfig:
    num_classes: int = 10
    """Number of classes; every label must lie in [0, num_classes)."""
    epochs_iters: int = 12
    """Number of training epochs."""
    batch_size: int = 64
    """Batch size per process (per card); the global batch is batch_size x world size."""
    learning_rate: float = 0.05
    """Base learning rate (peak of the cosine schedule)."""
    pretrain_weight_path: Optional[str] = None
    """Weights to fine-tune from: a local .pdparams file, an http(s) URL (downloaded once per machine into PADDLEDIST_HOME, default ~/.cache/paddledist), `default` (the model's official PaddleX pretrained weights) or null. Loaded by name; a classifier head of another class count is replaced."""
    warmup_steps: int = 0
    """Linear warm-up length in epochs (PaddleX's name says steps, its code means epochs)."""
    resume_path: Optional[str] = None
    """Checkpoint (.pdparams: a local file, an http(s) URL or `default`, as pretrain_weight_path) to resume from; training continues at the next epoch (after a preemption, at the next step). `auto`: <Global.output>/latest/latest.pdparams when it exists, else a fresh start."""
    log_interval: int = 10
    """Log every this many iterations."""
    eval_interval: int = 1
    """Evaluate every this many epochs (and always after the last)."""
    save_interval: int = 1
    """Save epoch_N every this many epochs."""
    max_epoch_checkpoints: Optional[int] = 5
    """epoch_N folders kept: the newest this many (train_result.json lists up to 5 as models.last_1..last_5);
    an older one is deleted once a newer one is written. null keeps every one, as PaddleX does."""
    dist_ips: Optional[List[str]] = None
    """Addresses of every machine, in rank order, e.g. 10.0.0.1,10.0.0.2 (the first machine hosts rank 0)."""
    augment: bool = True
    """(paddledist) Random augmentation in training."""
    input_size: Optional[int] = None
    """(paddledist) Training and eval crop side; null: the model's design size from its pretrained_cfg (224 for the ImageNet models, 32 for LeNet). Eval resizes the short side to the model's resize_short scaled by input_size / design size, then centre-crops."""
    num_workers: int = 0
    """(paddledist) Data-loader worker processes per rank (0 = load in the training process)."""
    optimizer: Optional[str] = None
    """(paddledist) Momentum or AdamW; null: the optimizer PaddleX trains Global.model with (docs/models.md)."""
    lr_scheduler: Optional[str] = None
    """(paddledist) cosine (to 0 at the last epoch) or piecewise (x0.1 after epochs 30, 60, 90), after Train.warmup_steps epochs of linear warm-up; null: PaddleX's schedule for the model."""
    momentum: Optional[float] = None
    """(paddledist) Momentum of the Momentum optimizer; null: PaddleX's value for the model (0.9)."""
    weight_decay: Optional[float] = None
    """(paddledist) Momentum: L2 regularisation coefficient; AdamW: decoupled weight decay (PaddleX's no_weight_decay_name and one_dim_param_no_weight_decay for the model apply); null: PaddleX's value for the model."""
    clip_grad_norm: Optional[float] = None
    """(paddledist) Clip gradients to this global norm; 0: no clipping; null: PaddleX's setting for the model."""
    scale_lr: bool = False
    """(paddledist) Scale the learning rate linearly by global batch / batch_size."""
    accum_steps: int = 1
    """(paddledist) Gradient accumulation steps (gradients are synchronised only on the last)."""
    global_batch_size: Optional[int] = None
    """(paddledist) Samples per update across all ranks, kept when the rank count changes (a restart on fewer machines, a resume elsewhere): accumulation ceil(global / (ranks x batch_size)), per-rank batch global / (ranks x accumulation), never above Train.batch_size; null: Train.batch_size x ranks x Train.accum_steps of the first start (a resumed checkpoint's)."""
    elastic_batch: str = "keep"
    """(paddledist) When the global batch does not split over the ranks at a per-rank batch of at most Train.batch_size: keep (stop, naming the sizes) or scale_lr (keep the per-rank batch and accumulation and scale the learning rate linearly, said in one line)."""
    amp: bool = False
    """Automatic mixed precision (GPU only); PaddleX's levels OFF, O1, O2 read as false, true, true."""
    visualdl: Optional[bool] = None
    """(paddledist) VisualDL scalars under Global.output/vdl_log: null (on when the visualdl package is installed: pip install "paddledist[vdl]"), true (on; a one-line note when it is not installed), false (off)."""
    fast_mkl_on_amd: bool = False
    """(paddledist) On AMD CPUs, let MKL take its AVX2 path (MKL_DEBUG_CPU_TYPE=5): ~2.5x faster CPU training, last bits differ (docs/benchmarks.md)."""
    grad_sync: str = "auto"
    """(paddledist) How ranks average gradients: auto (reducer on GPU; shm for CPU ranks on one x86-64 machine, bucket across machines or elsewhere; a path whose paddle capability fails its probe is passed over, docs/install.md), reducer (paddle's DataParallel), shm (shared memory, x86-64 only), bucket (paddle's all-reduce in buckets, overlapped with backward), flat (one all-reduce of a flat buffer after backward)."""
    grad_bucket_mb: float = 4.0
    """(paddledist) Train.grad_sync=bucket: MB of gradients per all-reduce; smaller buckets start sending earlier in backward, larger ones pay the link's latency less often (docs/benchmarks.md)."""
    grad_compression: Optional[str] = None
    """(paddledist) Train.grad_sync=bucket: the dtype gradients cross the network in: null or none (float32), bf16 (half the bytes; its accuracy effect is in docs/benchmarks.md), fp16 (GPU only: paddle's gloo all-reduce of float16 returns inf)."""
    port: int = 6170
    """(paddledist) Client port of the job's own etcd on the machines that run a member (peers: Train.port + 50); paddle's launcher uses the few ports just above it on the first machine."""
    job_id: str = "paddledist"
    """(paddledist) Job id passed to paddle.distributed.launch."""
    job_secret_file: Optional[str] = None
    """(paddledist) A file (readable by its owner only) holding the job secret: the job's own etcd then runs with authentication, its users' passwords derived from it (docs/security.md); else the PADDLEDIST_JOB_SECRET variable; neither: the job's etcd is open to anyone who reaches Train.port."""
    node_ip: Optional[str] = None
    """(paddledist) This machine's address when interface matching cannot find it (else POD_IP)."""
    peer_timeout: int = 120
    """(paddledist) Seconds to wait for every machine to appear before failing, naming the missing ones."""
    max_bad_samples: int = 10
    """(paddledist) Undecodable samples tolerated (counted and reported) before training stops."""
    heartbeat_interval: float = 5.0
    """(paddledist) Seconds between the renewals of each machine's supervisor's lease in the job's etcd."""
    dy2st: bool = False
    """(PaddleX) Train through paddle.jit.to_static (dynamic-to-static): the same parameters and names, the forward run as paddle's static program."""
    uniform_output_enabled: bool = True
    """(PaddleX) Export an inference model (inference/) beside every saved checkpoint, as PaddleX does."""
    basic_config_path: Optional[str] = None
    """(PaddleX) PaddleClas training config to start from; accepted, no effect here (the model registry supplies it)."""
    heartbeat_timeout: float = 60.0
    """(paddledist) TTL of each supervisor's etcd lease: a machine whose lease is not renewed for this long (or whose supervisor stopped, revoking it) is declared lost and every machine stops its workers."""
    max_restarts: int = 0
    """(paddledist) Times a multi-process job relaunches itself after a failed rank or a lost machine: every machine's supervisor ends its workers, waits (up to Train.peer_timeout) for all machines to meet again on Train.port and continues from <Global.output>/latest; 0: fail at once."""
    preempt_grace: float = 45.0
    """(paddledist) Seconds after SIGTERM or SIGUSR1 to a supervisor for every rank to save latest at the next step and exit (code 75) before the job is ended without it; keep it below Slurm's --signal=USR1@T."""
    # --- machines from a master address or a scheduler (docs/multi_machine.md) ---
    dist_master: Optional[str] = None
    """(paddledist) host:port of the first machine (an address or a host name), with Train.nnodes, instead of Train.dist_ips: the machines meet there and agree their ranks (the first machine is node 0, the others in address order, or the platform's rank), then launch with paddle's --master host:port --nnodes N --rank r. The job's etcd runs on Train.port of that host. Kubeflow's PADDLE_MASTER/PADDLE_NNODES set the same when neither key is given. etcd://H1:2379[,H2:2379...]: the machines (Train.nnodes of them) meet, hold their leases and decide in that etcd cluster under /paddledist/<Train.job_id>/ instead (ranks by the platform's rank, else by address; its TLS and user from ETCDCTL_CACERT/CERT/KEY, ETCDCTL_USER, ETCDCTL_PASSWORD)."""
    nnodes: Optional[str] = None
    """(paddledist) Number of machines with Train.dist_master (paddle's --nnodes): N, or an elastic range MIN:MAX (e.g. 2:4): node 0 waits up to Train.peer_timeout for MAX machines, then continues with those that came when at least MIN did (also after a lost machine, with Train.max_restarts); with Train.dist_ips null (the list is the count) or MIN:MAX with MAX the length of the list and MIN more than half of it (a quorum): the list is a pool, and after a lost machine (with Train.max_restarts) the live listed machines re-form without it in etcd, the first of them rank 0."""
    launch_style: str = "ips"
    """(paddledist) How a machine list (Train.dist_ips, paddle-operator's PADDLE_TRAINERS, Slurm's node list) is handed to paddle's launcher: ips (--ips A,B, as PaddleX documents) or master (--master <first>:Train.port+1 --nnodes N --rank r); ranks and results are the same."""
    control_plane: str = "etcd"
    """(paddledist) Where the machines meet and watch each other: etcd, the only choice (the job's own etcd with Train.dist_ips or Train.dist_master=host:port: one member on each of the first three listed machines, on the first only with two, on the master's machine in master-address mode; clients on Train.port, peers on Train.port+50, authenticated with a job secret; it survives losing any one of three). Train.dist_master=etcd://... uses that etcd."""
    stall_timeout: Optional[float] = 300.0
    """(paddledist) Stall watchdog: seconds in which no rank on a machine finishes a training step, every process alive, before the job stops on every machine naming the ranks, with each rank's Python stack in its workerlog; counted from the first step, the end of an epoch (evaluation, checkpoints) excluded; 0 or null: off."""


@dataclass(frozen=True)
class EvaluateConfig:
    weight_path: Optional[str] = None
    """Weights to evaluate (a local .pdparams file, an http(s) URL or `default`); null: the train stage's best_model."""
    log_interval: int = 10
    """Log every this many iterations."""
    basic_config_path: Optional[str] = None
    """(PaddleX) PaddleClas config to evaluate with; accepted, no effect here."""


@dataclass(frozen=True)
class ExportConfig:
    weight_path: Optional[str] = None
    """Weights to export (a local .pdparams file, an http(s) URL or `default`); null: the train stage's best_model."""
    basic_config_path: Optional[str] = None
    """(PaddleX) PaddleClas config to export with; accepted, no effect here."""


@dataclass(frozen=True)
class KernelOptionConfig:
    run_mode: str = "paddle"
    """Inference engine: paddle (default) or mkldnn (oneDNN kernels on CPU)."""
    cpu_threads: Optional[int] = None
    """(PaddleX) CPU threads of the inference engine; accepted, no effect here (paddle's default)."""


@dataclass(frozen=True)
class PredictConfig:
    batch_size: int = 1
    """Images per inference batch."""
    model_dir: Optional[str] = None
    """Exported model folder; by default the export stage's output."""
    input: Optional[str] = None
    """An image file, a folder of images, or an http(s) URL of an image (downloaded into the weight cache)."""
    kernel_option: KernelOptionConfig = field(default_factory=KernelOptionConfig)
    """Inference engine options."""
    use_hpip: bool = False
    """(PaddleX) Use PaddleX's high-performance inference plugin; accepted, no effect here."""
    hpip_config: Any = None
    """(PaddleX) Options of the high-performance inference plugin; accepted, no effect here."""
    hpi_config: Any = None
    """(PaddleX) The spelling PaddleX 3.x's code reads for hpip_config; accepted, no effect here."""
    engine: Optional[str] = None
    """(PaddleX) Inference engine name (paddle, hpi, ...); accepted, no effect here."""
    engine_config: Any = None
    """(PaddleX) Options of Predict.engine; accepted, no effect here."""
    genai_config: Any = None
    """(PaddleX) Generative-AI serving options (not used by classification); accepted, no effect here."""


@dataclass(frozen=True)
class BenchmarkConfig:
    """PaddleX's benchmarking switches; accepted so PaddleX configs load, and none has an effect here."""

    env: Any = None
    """(PaddleX) Environment variables for the benchmark run; no effect here."""
    seed: Optional[int] = None
    """(PaddleX) Seed of the benchmark run; no effect here (Global.seed is the seed)."""
    do_eval: bool = False
    """(PaddleX) Evaluate during the benchmark run; no effect here."""
    num_workers: Optional[int] = None
    """(PaddleX) Data-loader workers of the benchmark run; no effect here (Train.num_workers is ours)."""
    amp: Any = None
    """(PaddleX) AMP level of the benchmark run (OFF, O1, O2); no effect here."""
    dali: bool = False
    """(PaddleX) Load data with NVIDIA DALI; no effect here."""
    shuffle: bool = False
    """(PaddleX) Shuffle data in the benchmark run; no effect here."""
    shared_memory: bool = True
    """(PaddleX) Data loader shared memory; no effect here."""
    print_mem_info: bool = True
    """(PaddleX) Log GPU memory use; no effect here."""


@dataclass(frozen=True)
class Config:
    Global: GlobalConfig = field(default_factory=GlobalConfig)
    CheckDataset: CheckDatasetConfig = field(default_factory=CheckDatasetConfig)
    Train: TrainConfig = field(default_factory=TrainConfig)
    Evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    Export: ExportConfig = field(default_factory=ExportConfig)
    Predict: PredictConfig = field(default_factory=PredictConfig)
    Benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
