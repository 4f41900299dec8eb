"""The run report (paddledist/report.py) and VisualDL's scalars.

Unit: report.html rendered from a run folder holds every section, embeds every picture as a decodable PNG and
loads nothing; a 60-class run lists its confusions instead of drawing them; no results is one line, exit 2.
Real: a 2-process training run writes report.html and vdl_log; Debian's Chromium opens the page from a file://
URL, every image in it loads, and the page names the model, world size and best top-1 (its screenshot is kept
under the test's tmp folder); VisualDL's own LogReader reads the scalars back."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from helpers.common import unavailable
from paddledist import cli, report
from paddledist.engine.hooks import VisualDLHook

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def history(epochs: int, hosts: tuple[str, ...]) -> list[dict]:
    return [{"epoch": e, "train_loss": 2.0 / e, "images_per_sec": 100.0 * e, "lr": 0.1 / e, "top1": 0.5 + e / 100,
             "top5": 0.9, "val_loss": 1.0 / e,
             "machines": [{"host": h, "nic": "eth0", "device": "cpu", "ranks": [2 * i, 2 * i + 1],
                           "images_per_sec": 50.0 * e + i, "data_wait": 0.01 * (i + 1)} for i, h in enumerate(hosts)]}
            for e in range(1, epochs + 1)]


def write_run(folder: Path, classes: int = 3, hosts: tuple[str, ...] = ("10.1.0.1", "10.1.0.2")) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    confusion = [[a, b, 5 if a == b else 1] for a in range(classes) for b in range(classes) if a == b or b == a + 1]
    train = {"model_name": "PP-LCNet_x0_25", "world_size": 4, "global_batch_size": 128, "start_epoch": 1,
             "epochs": 3, "done_flag": True, "best": {"epoch": 3, "top1": 0.53}, "history": history(3, hosts),
             "restarts": [{"cause": "node 1 (10.1.0.2) lost: its connection broke <b>", "epoch": 2, "nodes": 2}],
             "confusion": confusion}
    (folder / "train_result.json").write_text(json.dumps(train))
    (folder / "config.yaml").write_text("Global:\n  model: PP-LCNet_x0_25  # <script>alert(1)</script>\n")
    (folder / "label_dict.txt").write_text("".join(f"{i} class_{i}\n" for i in range(classes)))
    return train


def images_of(page: str) -> list[Image.Image]:
    found = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    return [Image.open(io.BytesIO(base64.b64decode(data))) for data in found]


@pytest.mark.unit
def test_the_report_holds_every_section_and_embeds_its_pictures(tmp_path):
    samples = sum(count for _, _, count in write_run(tmp_path)["confusion"])
    page = Path(report.write(str(tmp_path))).read_text()
    assert "<h1>paddledist run report: PP-LCNet_x0_25</h1>" in page
    assert "<tr><td>world size</td><td>4</td></tr>" in page and "0.5300 (epoch 3)" in page
    for section in ("Training", "Machines", "Cluster and restarts", f"Classes (last epoch, {samples} samples)",
                    "Config as run"):
        assert f"<h2>{section}" in page, section
    assert "<td>10.1.0.2</td><td>eth0</td><td>cpu</td><td>2,3</td><td>151.0</td><td>2.0%</td>" in page
    assert "its connection broke &lt;b&gt;" in page and "&lt;script&gt;alert(1)" in page  # escaped, not markup
    pictures = images_of(page)
    assert len(pictures) == 5 and all(p.format == "PNG" and p.width > 300 for p in pictures)
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")  # nothing loaded from anywhere


@pytest.mark.unit
def test_many_classes_are_listed_not_drawn_and_evaluate_results_come_first(tmp_path):
    write_run(tmp_path, classes=60)
    cells = [[k, (k + 1) % 60, 3] for k in range(60)] + [[k, k, 7] for k in range(60)]
    (tmp_path / "evaluate_result.json").write_text(json.dumps({
        "model_name": "PP-LCNet_x0_25", "weight_path": "best_model/best_model.pdparams", "top1": 0.7, "top5": 0.9,
        "num_samples": 600, "world_size": 1, "confusion": cells}))
    page = report.render(str(tmp_path))
    assert "Classes (evaluate, 600 samples)" in page and "<td>class_59</td><td>class_0</td><td>3</td>" in page
    assert 'alt="confusion matrix"' not in page and "evaluate: top-1 / top-5</td><td>0.7000 / 0.9000" in page


@pytest.mark.unit
def test_no_results_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no train_result.json or evaluate_result.json to report on" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.unit
def test_visualdl_asked_for_but_missing_is_one_line_and_training_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "visualdl", None)  # what an environment without the package gives: ImportError
    with caplog.at_level(logging.WARNING, logger="paddledist"):
        assert VisualDLHook(str(tmp_path), True, True).writer is None
        assert VisualDLHook(str(tmp_path), None, True).writer is None
    assert [r.getMessage() for r in caplog.records] == [
        'Train.visualdl: VisualDL is not installed, so no vdl_log is written: pip install "paddledist[vdl]" '
        "(training goes on)"]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report-run") / "out"
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c",
                           str(REPO / "configs" / "image_classification.yaml"), "-o", "Global.device=cpu:0,1",
                           "Train.epochs_iters=3", f"Global.output={out}",
                           f"Global.dataset_dir={REPO / 'dataset' / 'digits'}"],
                          capture_output=True, text=True, timeout=300, cwd=out.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def chromium() -> str:
    """Debian's chromium (installed here on first use where this runs as root with the package registry)."""
    found = shutil.which("chromium")
    if found is None and shutil.which("apt-get"):
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            subprocess.run(cmd, capture_output=True, timeout=900, env={"DEBIAN_FRONTEND": "noninteractive",
                                                                    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        found = shutil.which("chromium")
    if found is None:
        unavailable("Debian's chromium is not installed and could not be (apt-get install chromium)")
    return found


PROBE = """<script>window.addEventListener("load", () => { const p = document.createElement("pre");
p.id = "probe"; p.textContent = JSON.stringify([...document.images].map(i => [i.alt, i.naturalWidth]));
document.body.appendChild(p); });</script>"""


@pytest.mark.multiproc
def test_chromium_shows_the_report_of_a_real_run_with_every_image_loaded(two_process_run, tmp_path):
    result = json.loads((two_process_run / "train_result.json").read_text())
    assert result["report"] == "report.html" and (two_process_run / "report.html").is_file()
    browser, profile = chromium(), tmp_path / "profile"
    # A copy of the page with a probe that lists each image's naturalWidth once everything has loaded.
    probed = tmp_path / "probed.html"
    probed.write_text((two_process_run / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                          "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120).stdout
    widths = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom)[1].replace("&quot;", '"'))
    assert len(widths) >= 5 and all(width > 0 for _, width in widths), widths
    best = f"{result['best']['top1']:.4f} (epoch {result['best']['epoch']})"
    for text in ("paddledist run report: LeNet", "<td>world size</td><td>2</td>", best, "<td>0,1</td>"):
        assert text in dom, text
    shot = tmp_path / "report.png"  # the CI artefact: a picture of the page as a person sees it
    subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1200,2400",
                    f"--screenshot={shot}", (two_process_run / "report.html").as_uri()],
                   capture_output=True, timeout=120)
    assert Image.open(shot).size == (1200, 2400)


@pytest.mark.multiproc
def test_visualdl_reads_back_the_scalars_rank_0_wrote(two_process_run):
    try:
        from visualdl import LogReader
    except ImportError:
        unavailable('visualdl is not installed: pip install -e ".[vdl]" (CI installs it)')
    result = json.loads((two_process_run / "train_result.json").read_text())
    assert result["visualdl_log"] == "vdl_log"
    (log,) = (two_process_run / "vdl_log").glob("vdlrecords.*.log")
    reader = LogReader(file_path=str(log))
    assert {"train/loss", "train/lr", "train/images_per_sec", "eval/top1", "eval/top5", "eval/loss"} <= set(
        reader.get_tags()["scalar"])
    top1 = [(r.id, r.value) for r in reader.get_data("scalar", "eval/top1")]
    assert top1 == [(h["epoch"], pytest.approx(h["top1"], abs=1e-6)) for h in result["history"]]
    steps = [r.id for r in reader.get_data("scalar", "train/loss")]  # one per optimizer step, in order
    assert steps == sorted(set(steps)) and len(steps) == len(reader.get_data("scalar", "train/lr")) >= 3


@pytest.mark.multiproc
def test_visualdl_is_on_by_default_once_installed_and_off_when_asked(tmp_path):
    pytest.importorskip("visualdl", reason='visualdl is not installed (pip install -e ".[vdl]")')
    on, off, other_rank = (VisualDLHook(str(tmp_path), wanted, main)
                           for wanted, main in ((None, True), (False, True), (None, False)))
    assert on.writer is not None and off.writer is None and other_rank.writer is None
    on.writer.close()
    assert (tmp_path / "vdl_log").is_dir()
