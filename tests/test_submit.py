"""tools/submit.py: the sbatch script and the CLI's handling of bad input (the manifest: test_submit_k8s.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from paddledist.submit.cli import main

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "image_classification.yaml")
SUBMIT = str(REPO / "tools" / "submit.py")


def emit(capsys, *args: str) -> str:
    assert main(["-c", CONFIG, *args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def sbatch_options(script: str) -> dict[str, str]:
    found = [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]
    return dict(opt.partition("=")[::2] for opt in found)


def srun_argv(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(lines) == 1, script
    return shlex.split(lines[0])


@pytest.mark.multiproc
def test_slurm_script_runs_train_once_per_node_with_the_same_overrides(capsys):
    script = emit(capsys, "-o", "Train.epochs_iters=2", "Global.output=out dir", "-o", "Train.batch_size=8",
                  "--emit", "slurm", "--nodes", "3", "--python", "/opt/py/bin/python", "--time", "01:00:00")
    assert script.startswith("#!/bin/bash\n")
    assert sbatch_options(script) == {
        "--job-name": "paddledist", "--nodes": "3", "--ntasks-per-node": "1", "--cpus-per-task": "1",
        "--signal": "B:USR1@120", "--requeue": "", "--open-mode": "append", "--time": "01:00:00"}
    argv = srun_argv(script)
    train = argv.index("/opt/py/bin/python")
    assert argv[:train] == ["srun", "--nodes", "3", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert argv[train + 1:] == [str(REPO / "tools" / "train.py"), "-c", CONFIG, "-o", "Train.epochs_iters=2",
                                "-o", "Global.output=out dir", "-o", "Train.batch_size=8", "${resume[@]}", "&"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0  # the shell can parse it


@pytest.mark.unit
def test_slurm_script_names_no_machine_and_takes_the_count_from_dist_ips(capsys):
    script = emit(capsys, "-o", "Train.dist_ips=10.0.0.1,10.0.0.2", "--emit", "slurm")
    assert sbatch_options(script)["--nodes"] == "2"
    assert "dist_ips" not in script and "10.0.0." not in script


@pytest.mark.unit
def test_slurm_script_asks_for_the_cards_of_global_device(capsys):
    script = emit(capsys, "-o", "Global.device=gpu:0,1,2,3", "--emit", "slurm", "--nodes", "2")
    options = sbatch_options(script)
    assert options["--gpus-per-node"] == "4" and "--cpus-per-task" not in options
    assert sbatch_options(emit(capsys, "-o", "Global.device=cpu:0,1", "--emit", "slurm"))["--cpus-per-task"] == "2"


@pytest.mark.multiproc
def test_requeued_slurm_job_resumes_from_the_latest_checkpoint(capsys, tmp_path):
    """The script's resume block, run by bash as a requeued (SLURM_RESTART_COUNT=1) and a first run would."""
    script = emit(capsys, "-o", f"Global.output={tmp_path}/out", "--emit", "slurm")
    block = script[script.index("resume=()"):script.index("trap ")] + 'for a in "${resume[@]}"; do echo "$a"; done\n'
    (tmp_path / "out" / "latest").mkdir(parents=True)
    (tmp_path / "out" / "latest" / "latest.pdparams").write_bytes(b"")
    def run(count): return subprocess.run(["bash", "-c", block], env={"SLURM_RESTART_COUNT": count},
                                          capture_output=True, text=True).stdout.split("\n")[:-1]
    assert run("1") == ["-o", f"Train.resume_path={tmp_path}/out/latest/latest.pdparams"]
    assert run("0") == []
    own = emit(capsys, "-o", "Train.resume_path=/x/y.pdparams", "--emit", "slurm")
    assert "SLURM_RESTART_COUNT" not in own  # the user's own resume_path is left alone


@pytest.mark.unit
@pytest.mark.parametrize("args,shown", [
    (["--emit", "pbs"], "--emit pbs: unknown scheduler; use --emit slurm or --emit k8s"),
    (["--emit", "slurm", "--nodes", "0"], "--nodes 0"),
    (["--emit", "slurm", "--nodes", "3", "-o", "Train.dist_ips=10.0.0.1,10.0.0.2"], "lists 2 machines"),
    (["--emit", "slurm", "-o", "Train.no_such_key=1"], "Train.no_such_key"),
    (["--emit", "slurm", "-o", "Global.device=gpu:2,3"], "use Global.device=gpu:0,1"),
    (["--emit", "k8s", "-o", "Global.device=xpu:0"], "--accelerator-resource"),
    (["--emit", "k8s", "--name", "Bad_Name"], "PaddleJob name 'Bad_Name'"),
    (["--emit"], "expected one argument"),
    (["--emit", "k8s", "-o", "Train.dist_master=node1:36543"], "the master address comes from the scheduler"),
    (["--emit", "slurm", "-o", "Train.job_id=a b"], "Train.job_id='a b' cannot go into an #SBATCH line"),
    (["--emit", "slurm", "--time", "1:00\n#SBATCH --x"], "--time='1:00\\n#SBATCH --x' cannot go into"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, shown):
    assert main(["-c", CONFIG, *args]) == 2
    err = capsys.readouterr().err
    assert shown in err and err.count("\n") == 1, err


@pytest.mark.unit
def test_config_that_lists_machines_is_refused(capsys, tmp_path):
    cfg = tmp_path / "listed.yaml"
    cfg.write_text("Train:\n  dist_ips: [10.0.0.1, 10.0.0.2]\n")
    assert main(["-c", str(cfg), "--emit", "slurm"]) == 2
    assert "sets Train.dist_ips: under a scheduler the machines come from the scheduler" in capsys.readouterr().err


@pytest.mark.unit
def test_node_count_from_train_nnodes_is_not_passed_on(capsys):
    script = emit(capsys, "-o", "Train.nnodes=3", "Train.epochs_iters=1", "--emit", "slurm")
    assert sbatch_options(script)["--nodes"] == "3" and "nnodes" not in srun_argv(script)[-3]
    assert srun_argv(script)[-4:] == ["-o", "Train.epochs_iters=1", "${resume[@]}", "&"]
    assert main(["-c", CONFIG, "--emit", "slurm", "-o", "Train.nnodes=3", "--nodes", "2"]) == 2
    assert "--nodes 2 but -o Train.nnodes=3" in capsys.readouterr().err


@pytest.mark.unit
def test_out_file_is_never_replaced_without_force(capsys, tmp_path):
    out = tmp_path / "job.sbatch"
    out.write_text("mine\n")
    assert main(["-c", CONFIG, "--emit", "slurm", "--out", str(out)]) == 2
    assert "exists; choose another file or add --force" in capsys.readouterr().err
    assert out.read_text() == "mine\n"
    assert main(["-c", CONFIG, "--emit", "slurm", "--out", str(out), "--force"]) == 0
    assert out.read_text().startswith("#!/bin/bash\n")
    assert [p.name for p in tmp_path.iterdir()] == ["job.sbatch"]  # no temporary file left


@pytest.mark.multiproc
def test_tool_exit_codes(tmp_path):
    def run(*args): return subprocess.run([sys.executable, SUBMIT, *args], capture_output=True, text=True,
                                          cwd=tmp_path, timeout=60)
    bad = run("-c", str(tmp_path / "missing.yaml"), "--emit", "slurm", "--out", "x.sh")
    assert bad.returncode == 2 and "no such config file" in bad.stderr and not (tmp_path / "x.sh").exists()
    good = run("-c", CONFIG, "--emit", "k8s", "--out", "job.yaml")
    assert good.returncode == 0 and (tmp_path / "job.yaml").read_text().count("\nkind: ") == 3
    assert (tmp_path / "job.yaml").stat().st_mode & 0o777 == 0o600  # it holds the job secret


@pytest.mark.unit
def test_a_node_range_asks_the_scheduler_for_its_maximum(capsys):
    script = emit(capsys, "-o", "Train.nnodes=2:3", "Train.epochs_iters=1", "--emit", "slurm")
    assert sbatch_options(script)["--nodes"] == "3" and "nnodes" not in srun_argv(script)[-3]
    assert main(["-c", CONFIG, "--emit", "slurm", "-o", "Train.nnodes=2:3", "--nodes", "2"]) == 2
    assert "--nodes 2 but -o Train.nnodes=2:3" in capsys.readouterr().err


@pytest.mark.multiproc
def test_the_sbatch_script_exports_one_secret_per_run_and_keeps_a_given_one(capsys):
    script = emit(capsys, "--emit", "slurm", "--nodes", "2")
    (line,) = [x for x in script.splitlines() if x.startswith("export PADDLEDIST_JOB_SECRET=")]
    show = line + '\necho "$PADDLEDIST_JOB_SECRET"\n'
    env = {k: v for k, v in os.environ.items() if k != "PADDLEDIST_JOB_SECRET"}
    made = [subprocess.run(["bash", "-c", show], env=env, capture_output=True, text=True).stdout.strip()
            for _ in range(2)]
    assert all(len(m) == 64 for m in made) and made[0] != made[1]
    given = subprocess.run(["bash", "-c", show], env={**env, "PADDLEDIST_JOB_SECRET": "kept-0123456789abcdef"},
                           capture_output=True, text=True).stdout.strip()
    assert given == "kept-0123456789abcdef"
