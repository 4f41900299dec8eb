"""Config loading, `-o` grammar and every user-error class, in-process (fast, no paddle import)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from paddledist.cli import build_parser
from paddledist.config import MODES, Config, DeviceSpec, load, parse_device, to_yaml
from paddledist.config.overrides import parse_overrides, parse_value
from paddledist.config.reference import render
from paddledist.errors import UserError

pytestmark = pytest.mark.unit

SCHEMA_KEYS = {
    "Global.model", "Global.mode", "Global.dataset_dir", "Global.device", "Global.output", "Global.seed",
    "Global.allow_outside_paths",
    "CheckDataset.convert.enable", "CheckDataset.convert.src_dataset_type",
    "CheckDataset.split.enable", "CheckDataset.split.train_percent", "CheckDataset.split.val_percent",
    "Train.num_classes", "Train.epochs_iters", "Train.batch_size", "Train.learning_rate",
    "Train.pretrain_weight_path", "Train.warmup_steps", "Train.resume_path", "Train.log_interval",
    "Train.eval_interval", "Train.save_interval", "Train.max_epoch_checkpoints", "Train.dist_ips", "Train.augment",
    "Train.input_size",
    "Train.num_workers", "Train.momentum", "Train.weight_decay", "Train.optimizer", "Train.lr_scheduler",
    "Train.clip_grad_norm", "Train.scale_lr", "Train.accum_steps", "Train.global_batch_size", "Train.elastic_batch",
    "Train.amp", "Train.visualdl", "Train.fast_mkl_on_amd", "Train.grad_sync", "Train.grad_bucket_mb",
    "Train.grad_compression", "Train.port", "Train.job_id", "Train.job_secret_file", "Train.node_ip",
    "Train.peer_timeout",
    "Train.max_bad_samples",
    "Train.heartbeat_interval", "Train.heartbeat_timeout", "Train.max_restarts", "Train.preempt_grace",
    "Train.dist_master", "Train.nnodes", "Train.launch_style", "Train.control_plane", "Train.stall_timeout",
    "Evaluate.weight_path", "Evaluate.log_interval",
    "Export.weight_path",
    "Predict.batch_size", "Predict.model_dir", "Predict.input", "Predict.kernel_option.run_mode",
    # PaddleX 3.x keys its code reads beyond the shipped module configs (tests/test_paddlex_config.py)
    "Global.export_with_pir", "Train.dy2st", "Train.uniform_output_enabled", "Train.basic_config_path",
    "Evaluate.basic_config_path", "Export.basic_config_path", "Predict.kernel_option.cpu_threads",
    "Predict.use_hpip", "Predict.hpip_config", "Predict.hpi_config", "Predict.engine", "Predict.engine_config",
    "Predict.genai_config", "Benchmark.env", "Benchmark.seed", "Benchmark.do_eval", "Benchmark.num_workers",
    "Benchmark.amp", "Benchmark.dali", "Benchmark.shuffle", "Benchmark.shared_memory", "Benchmark.print_mem_info",
}

# PaddleX image-classification keys (paddlex/configs/modules/image_classification/*.yaml, plus dist_ips).
PADDLEX_KEYS = {
    "Global.model", "Global.mode", "Global.dataset_dir", "Global.device", "Global.output",
    "CheckDataset.convert.enable", "CheckDataset.convert.src_dataset_type",
    "CheckDataset.split.enable", "CheckDataset.split.train_percent", "CheckDataset.split.val_percent",
    "Train.num_classes", "Train.epochs_iters", "Train.batch_size", "Train.learning_rate",
    "Train.pretrain_weight_path", "Train.warmup_steps", "Train.resume_path", "Train.log_interval",
    "Train.eval_interval", "Train.save_interval", "Train.dist_ips",
    "Evaluate.weight_path", "Evaluate.log_interval",
    "Export.weight_path",
    "Predict.batch_size", "Predict.model_dir", "Predict.input", "Predict.kernel_option.run_mode",
}


def _schema_keys(schema=Config, prefix=""):
    for f in dataclasses.fields(schema):
        tp = typing.get_type_hints(schema)[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _schema_keys(tp, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def _yaml_keys(data, prefix=""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _yaml_keys(value, f"{prefix}{key}.")
        else:
            yield prefix + key


def _error(path, overrides=()) -> str:
    with pytest.raises(UserError) as info:
        load(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


# --- the surface -------------------------------------------------------------------------------

def test_schema_keys_are_pinned():
    # Adding, renaming or removing a key changes the user-facing surface: update docs and this set.
    assert set(_schema_keys()) == SCHEMA_KEYS


def test_every_key_is_documented():
    text = render()
    for key in SCHEMA_KEYS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
        assert not row.endswith("|  |"), f"{key} has no docstring in schema.py"


def test_committed_reference_matches_the_schema():
    committed = (Path(__file__).parent.parent / "docs" / "config_reference.md").read_text(encoding="utf-8")
    assert committed == render(), "run: python -m paddledist.config.reference > docs/config_reference.md"


def test_every_paddlex_key_is_in_the_schema_and_the_test_file(paddlex_yaml):
    assert PADDLEX_KEYS <= SCHEMA_KEYS
    assert set(_yaml_keys(yaml.safe_load(paddlex_yaml.read_text()))) == PADDLEX_KEYS


def test_paddlex_file_loads_unchanged(paddlex_yaml):
    cfg = load(str(paddlex_yaml))
    assert cfg.Global.model == "ResNet18"
    assert cfg.Global.mode == ("check_dataset",)
    assert cfg.Global.dataset_dir == "/paddle/dataset/paddlex/cls/cls_flowers_examples"
    assert cfg.Global.device == "gpu:0,1,2,3"
    assert cfg.Global.output == "output"
    assert cfg.CheckDataset.convert.enable is False and cfg.CheckDataset.convert.src_dataset_type is None
    assert cfg.CheckDataset.split.enable is False and cfg.CheckDataset.split.train_percent is None
    assert (cfg.Train.num_classes, cfg.Train.epochs_iters, cfg.Train.batch_size) == (102, 20, 64)
    assert cfg.Train.learning_rate == 0.1 and cfg.Train.warmup_steps == 5 and cfg.Train.resume_path is None
    assert cfg.Train.pretrain_weight_path.endswith("ResNet18_pretrained.pdparams")
    assert (cfg.Train.log_interval, cfg.Train.eval_interval, cfg.Train.save_interval) == (1, 1, 1)
    assert cfg.Train.dist_ips == ["10.0.0.1", "10.0.0.2"]
    assert cfg.Evaluate.weight_path == "output/best_model/best_model.pdparams" and cfg.Evaluate.log_interval == 1
    assert cfg.Export.weight_path.endswith(".pdparams")
    assert cfg.Predict.batch_size == 1 and cfg.Predict.model_dir == "output/best_model/inference"
    assert cfg.Predict.input.endswith(".jpg") and cfg.Predict.kernel_option.run_mode == "paddle"


def test_defaults_without_a_file():
    cfg = load(None)
    assert cfg == dataclasses.replace(Config(), Global=dataclasses.replace(Config().Global, mode=("train",)))


def test_config_is_frozen():
    cfg = load(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.Train.batch_size = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.Train = None


def test_to_yaml_round_trips(paddlex_yaml, write_yaml):
    cfg = load(str(paddlex_yaml), ["Global.mode=[train, evaluate]"])
    assert load(str(write_yaml(to_yaml(cfg)))) == cfg


# --- precedence: schema defaults < file < -o ---------------------------------------------------

def test_precedence(write_yaml):
    path = str(write_yaml("Train:\n  batch_size: 8\n  epochs_iters: 3\n"))
    cfg = load(path, ["Train.batch_size=16"])
    assert cfg.Train.batch_size == 16          # -o beats the file
    assert cfg.Train.epochs_iters == 3         # the file beats the default
    assert cfg.Train.learning_rate == Config().Train.learning_rate  # default where nobody says otherwise


def test_later_override_wins():
    assert load(None, ["Train.batch_size=4", "Train.batch_size=5"]).Train.batch_size == 5


def test_override_can_null_a_file_value(paddlex_yaml):
    assert load(str(paddlex_yaml), ["Train.dist_ips=null"]).Train.dist_ips is None


@pytest.mark.parametrize("text", ["Train:\n", "Train: {}\nEvaluate:\n"])
def test_empty_sections_keep_defaults(write_yaml, text):
    assert load(str(write_yaml(text))) == load(None)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_error_naming_it(write_yaml, text):
    path = write_yaml(text)
    with pytest.raises(UserError, match=f"config file {path} is empty"):
        load(str(path))


# --- the -o grammar ----------------------------------------------------------------------------

def test_cli_collects_repeated_and_grouped_overrides():
    args = build_parser("t").parse_args(["-c", "x.yaml", "-o", "A.b=1", "C.d=2", "-o", "E.f=3", "--dry-run"])
    assert [item for group in args.override for item in group] == ["A.b=1", "C.d=2", "E.f=3"]
    assert args.dry_run


def test_split_on_first_equals_only():
    assert parse_overrides(["Global.output=/tmp/a=b"]) == [("Global.output", "/tmp/a=b")]
    assert load(None, ["Global.output=/tmp/a=b"]).Global.output == "/tmp/a=b"


@pytest.mark.parametrize("text, value", [
    ("3", 3), ("0.1", 0.1), ("true", True), ("False", False), ("null", None), ("~", None), ("", None),
    ("[a, b]", ["a", "b"]), ("hello world", "hello world"), ("x=y", "x=y"), ("[a", "[a"),
])
def test_values_are_yaml_scalars(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize("override, key, value", [
    ("Train.pretrain_weight_path=null", "pretrain_weight_path", None),
    ("Train.resume_path=", "resume_path", None),
    ("Train.dist_ips=10.0.0.1,10.0.0.2", "dist_ips", ["10.0.0.1", "10.0.0.2"]),
    ("Train.dist_ips=10.0.0.1, 10.0.0.2", "dist_ips", ["10.0.0.1", "10.0.0.2"]),
    ("Train.dist_ips=[10.0.0.1, 10.0.0.2]", "dist_ips", ["10.0.0.1", "10.0.0.2"]),
    ("Train.dist_ips=10.0.0.1", "dist_ips", ["10.0.0.1"]),
    ("Train.learning_rate=1e-3", "learning_rate", 0.001),
    ("Train.learning_rate=2", "learning_rate", 2.0),
    ("Train.job_id=my job", "job_id", "my job"),        # a value with spaces (one shell word)
    ("Train.job_id=0123", "job_id", "0123"),            # string keys keep the text as typed
    ("Train.job_id='7'", "job_id", "7"),
    ("Train.job_id=run #2", "job_id", "run #2"),
    ("Train.amp=true", "amp", True),
])
def test_override_values(override, key, value):
    assert getattr(load(None, [override]).Train, key) == value


@pytest.mark.parametrize("override, modes", [
    ("Global.mode=evaluate", ("evaluate",)),
    ("Global.mode=[check_dataset, train]", ("check_dataset", "train")),
    ("Global.mode=train,evaluate", ("train", "evaluate")),
])
def test_mode_is_a_tuple(override, modes):
    assert load(None, [override]).Global.mode == modes


def test_mode_list_in_file(write_yaml):
    assert load(str(write_yaml("Global:\n  mode: [train, export]\n"))).Global.mode == ("train", "export")
    assert set(MODES) == {"check_dataset", "train", "evaluate", "export", "predict", "doctor"}


def test_dist_ips_yaml_list_in_file(write_yaml):
    cfg = load(str(write_yaml("Train:\n  dist_ips:\n    - 10.0.0.1\n    - 10.0.0.2\n")))
    assert cfg.Train.dist_ips == ["10.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize("item", ["Train.batch_size", "=3", ".batch_size=3", "Train.=3", "Train..x=1"])
def test_malformed_override(item):
    assert "expected Section.key=value" in _error(None, [item])


def test_override_values_are_never_evaluated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = _error(None, ["Train.batch_size=__import__('os').system('touch x')"])
    assert not (tmp_path / "x").exists()
    assert "Train.batch_size must be an integer" in message and "__import__" in message


def test_no_interpolation(monkeypatch):
    monkeypatch.setenv("PADDLEDIST_SECRET", "leaked")
    cfg = load(None, ["Global.output=${oc.env:PADDLEDIST_SECRET}", "Train.job_id=${Global.model}/${USER}"])
    assert cfg.Global.output == "${oc.env:PADDLEDIST_SECRET}"
    assert cfg.Train.job_id == "${Global.model}/${USER}"
    assert "must be an integer" in _error(None, ["Train.batch_size=${Train.epochs_iters}"])


def test_omegaconf_missing_marker_is_rejected():
    assert "'???' is not a value" in _error(None, ["Global.output=???"])


# --- error classes -----------------------------------------------------------------------------

@pytest.mark.parametrize("override, suggestion", [
    ("Train.epoch_iters=3", "did you mean Train.epochs_iters?"),
    ("Train.batchsize=3", "did you mean Train.batch_size?"),
    ("Trian.batch_size=3", "did you mean Train?"),
    ("Predict.kernel_option.runmode=paddle", "did you mean Predict.kernel_option.run_mode?"),
])
def test_unknown_key_did_you_mean(override, suggestion):
    message = _error(None, [override])
    assert f"unknown config key {override.split('=')[0]}" in message and suggestion in message


def test_unknown_key_in_file_names_the_file(write_yaml):
    path = str(write_yaml("Train:\n  epoch_iters: 3\n"))
    message = _error(path)
    assert message.startswith(path) and "did you mean Train.epochs_iters?" in message


def test_unknown_key_without_close_match_lists_known_keys():
    assert "known keys: Export.weight_path" in _error(None, ["Export.zzz=1"])


@pytest.mark.parametrize("key", ["Train", "CheckDataset.split"])
def test_section_is_not_a_value(key):
    assert f"{key} is a section" in _error(None, [f"{key}=3"])


def test_value_is_not_a_section():
    assert "Train.batch_size is a value, not a section" in _error(None, ["Train.batch_size.x=3"])


@pytest.mark.parametrize("override, expected, shown", [
    ("Train.batch_size=abc", "an integer", "'abc'"),
    ("Train.batch_size=3.5", "an integer", "3.5"),
    ("Train.batch_size=true", "an integer", "True"),
    ("Train.learning_rate=fast", "a number", "'fast'"),
    ("Train.amp=2", "true or false", "2"),
    ("Global.seed=null", "an integer", "null"),
    ("Train.dist_ips={a: 1}", "a list of strings or null", "{'a': 1}"),
    ("Train.dist_ips=[[a], b]", "a list of strings or null", "[['a'], 'b']"),
    ("CheckDataset.split.train_percent=half", "an integer or null", "'half'"),
])
def test_wrong_type_names_key_expected_type_and_value(override, expected, shown):
    key = override.split("=")[0]
    assert f"{key} must be {expected}, got {shown}" in _error(None, [override])


def test_wrong_type_in_file(write_yaml):
    path = str(write_yaml("Train:\n  batch_size: '64'\n"))
    assert _error(path) == f"{path}: Train.batch_size must be an integer, got '64' (str)"


def test_missing_config_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    assert _error(missing) == f"config file not found: {missing} (pass an existing YAML file with -c)"


def test_malformed_yaml_names_the_line(write_yaml):
    path = str(write_yaml("Global:\n  model: LeNet\n  device: [cpu\nTrain:\n  batch_size: 8\n"))
    message = _error(path)
    assert message.startswith(f"malformed YAML at {path}:4:")


def test_top_level_must_be_a_mapping(write_yaml):
    assert "top level must be a mapping" in _error(str(write_yaml("- Train\n")))


@pytest.mark.parametrize("override, bound", [
    ("Train.epochs_iters=0", ">= 1"), ("Train.batch_size=0", ">= 1"), ("Train.batch_size=-8", ">= 1"),
    ("Train.learning_rate=0", "> 0"), ("Train.learning_rate=-0.1", "> 0"),
    ("Train.learning_rate=.nan", "> 0"), ("Train.learning_rate=.inf", "> 0"),
    ("Train.num_classes=0", ">= 1"), ("Predict.batch_size=0", ">= 1"), ("Train.port=80", ">= 1024"),
])
def test_out_of_range(override, bound):
    key = override.split("=")[0]
    message = _error(None, [override])
    assert message.startswith(f"{key} must be") and bound in message and f"-o {key}=" in message


def test_boundaries_are_accepted():
    cfg = load(None, ["Train.epochs_iters=1", "Train.batch_size=1", "Train.learning_rate=1e-9"])
    assert (cfg.Train.epochs_iters, cfg.Train.batch_size, cfg.Train.learning_rate) == (1, 1, 1e-9)


@pytest.mark.parametrize("spec, kind, ids", [
    ("cpu", "cpu", (0,)), ("cpu:0,1", "cpu", (0, 1)), ("gpu", "gpu", (0,)), ("gpu:0,1,2,3", "gpu", (0, 1, 2, 3)),
    ("GPU:3", "gpu", (3,)),
])
def test_valid_devices(spec, kind, ids):
    assert parse_device(spec) == DeviceSpec(kind, ids)
    assert parse_device(spec).nproc == len(ids)
    assert load(None, [f"Global.device={spec}"]).Global.device == spec


@pytest.mark.parametrize("spec", ["tpu", "gpu:a", "cpu:0,0", "gpu:-1", "cpu:0,", "xpu:a", "npux:0"])
def test_invalid_devices(spec):
    with pytest.raises(UserError, match="Global.device"):
        parse_device(spec)
    assert _error(None, [f"Global.device={spec}"]).startswith("Global.device:")


@pytest.mark.parametrize("override", ["Global.mode=fit", "Global.mode=[train, fit]", "Global.mode=[]"])
def test_unknown_mode(override):
    message = _error(None, [override])
    assert message.startswith("Global.mode") and "check_dataset, train, evaluate, export, predict" in message


@pytest.mark.parametrize("overrides", [["Train.dist_ips=[]"], ["Train.dist_ips=10.0.0.1,,10.0.0.2"]])
def test_bad_dist_ips(overrides):
    assert _error(None, overrides).startswith("Train.dist_ips")


def test_split_percentages_must_add_up():
    message = _error(None, ["CheckDataset.split.enable=true", "CheckDataset.split.train_percent=80",
                            "CheckDataset.split.val_percent=30"])
    assert "add up to 100" in message
    cfg = load(None, ["CheckDataset.split.enable=true", "CheckDataset.split.train_percent=80",
                      "CheckDataset.split.val_percent=20"])
    assert cfg.CheckDataset.split.train_percent == 80


def test_heartbeat_timeout_must_cover_two_intervals():
    assert "Train.heartbeat_timeout (3.0) must be at least twice Train.heartbeat_interval (2.0)" in \
        _error(None, ["Train.heartbeat_interval=2", "Train.heartbeat_timeout=3"])
    assert "Train.heartbeat_interval must be a finite number > 0" in _error(None, ["Train.heartbeat_interval=0"])
    cfg = load(None, ["Train.heartbeat_interval=0.5", "Train.heartbeat_timeout=1"])
    assert (cfg.Train.heartbeat_interval, cfg.Train.heartbeat_timeout) == (0.5, 1.0)


def test_stall_timeout_is_off_at_0_or_null_and_never_negative():
    assert load(None, ["Train.stall_timeout=0"]).Train.stall_timeout == 0
    assert load(None, ["Train.stall_timeout=null"]).Train.stall_timeout is None
    assert "Train.stall_timeout must be a finite number >= 0, got -1.0" in _error(None, ["Train.stall_timeout=-1"])
