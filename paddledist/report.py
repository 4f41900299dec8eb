"""report.html of a run: one self-contained page from the result files under Global.output.

    paddledist report <Global.output>       (also written by rank 0 at the end of train and of evaluate)

It reads train_result.json, evaluate_result.json, config.yaml and label_dict.txt, whichever exist, and shows
the curves of loss, lr, top-1 and images/s per epoch, each machine's throughput and data wait, the cluster
(machines, ranks, devices, NIC, restarts and their causes), the confusion matrix and per-class accuracy, and
the config as run. Pictures are matplotlib PNGs embedded as data: URIs; the page has no script and loads
nothing, so it opens from a file:// URL on a machine without network.
"""

from __future__ import annotations

import base64
import html
import os
from typing import Optional

import numpy as np

from paddledist.config.safeload import read_json, read_text
from paddledist.data.formats import read_label_dict
from paddledist.runfiles.results import REPORT
from paddledist.errors import UserError
from paddledist.fsio import atomic_write

MATRIX_CLASSES = 50
"""Up to this many classes the confusion matrix is drawn; above, its largest off-diagonal cells are listed."""
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}table{border-collapse:collapse;"
         "margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
         "img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}")


def write(output: str) -> str:
    """Render the report of the run in `output` and write it atomically as output/report.html."""
    path = os.path.join(output, REPORT)
    atomic_write(path, render(output))
    return path


def render(output: str) -> str:
    train, evaluation = _json(output, "train_result.json"), _json(output, "evaluate_result.json")
    if train is None and evaluation is None:
        raise UserError(f"{output}: no train_result.json or evaluate_result.json to report on; pass the "
                        f"Global.output folder of a train or evaluate run")
    names = read_label_dict(os.path.join(output, "label_dict.txt"))
    model = (train or evaluation).get("model_name", "?")
    parts = [f"<h1>paddledist run report: {_e(model)}</h1>", _summary(train, evaluation)]
    if train and train.get("history"):
        parts += _training(train["history"]) + _machines(train) + _cluster(train)
    confusion = (evaluation or {}).get("confusion") or (train or {}).get("confusion") or []
    if confusion:
        parts += _classes(confusion, names, "evaluate" if (evaluation or {}).get("confusion") else "last epoch")
    parts.append(_config(output))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>paddledist report: {_e(model)}"
            f"</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def _json(output: str, name: str) -> Optional[dict]:
    path = os.path.join(output, name)
    data = read_json(path, name) if os.path.isfile(path) else None
    return data if isinstance(data, dict) else None


def _e(value) -> str:
    return html.escape(str(value))


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _table(header: Optional[list[str]], rows: list[list]) -> str:
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _summary(train: Optional[dict], evaluation: Optional[dict]) -> str:
    rows = []
    if train:
        best = train.get("best") or {}
        top1 = best.get("top1")
        rows += [["model", train.get("model_name")], ["world size", train.get("world_size")],
                 ["machines", len((train.get("history") or [{}])[-1].get("machines") or []) or 1],
                 ["best top-1", "-" if top1 is None else f"{top1:.4f} (epoch {best.get('epoch')})"],
                 ["epochs", f"{train.get('start_epoch')}..{train.get('epochs')}"],
                 ["global batch size", train.get("global_batch_size")], ["restarts", len(train.get("restarts") or [])],
                 ["finished (done_flag)", train.get("done_flag")]]
    if evaluation:
        rows += [["evaluate: weights", evaluation.get("weight_path")],
                 ["evaluate: top-1 / top-5", f"{evaluation.get('top1', 0):.4f} / {evaluation.get('top5', 0):.4f}"],
                 ["evaluate: samples, world size", f"{evaluation.get('num_samples')}, {evaluation.get('world_size')}"]]
    return "<h2>Summary</h2>" + _table(None, rows)


def _training(history: list[dict]) -> list[str]:
    epochs = [h["epoch"] for h in history]
    evaluated = [h for h in history if "top1" in h]
    series = {"train loss": (epochs, [h.get("train_loss") for h in history]),
              "learning rate (end of epoch)": ([h["epoch"] for h in history if "lr" in h],
                                               [h["lr"] for h in history if "lr" in h]),
              "val top-1": ([h["epoch"] for h in evaluated], [h["top1"] for h in evaluated]),
              "images/s (all machines)": (epochs, [h.get("images_per_sec") for h in history])}
    return ["<h2>Training</h2>", _img(_plots().curves(series, "per epoch"), "training curves")]


def _machines(train: dict) -> list[str]:
    history = [h for h in train["history"] if h.get("machines")]
    if not history:
        return []
    hosts = list(dict.fromkeys(m["host"] for h in history for m in h["machines"]))
    epochs = [h["epoch"] for h in history]
    rate, wait = _per_host(history, hosts, "images_per_sec"), _per_host(history, hosts, "data_wait", 100)
    rows = [[m["host"], m.get("nic", ""), m.get("device", ""), ",".join(map(str, m["ranks"])), m["images_per_sec"],
             f"{100 * m['data_wait']:.1f}%"] for m in history[-1]["machines"]]
    return ["<h2>Machines</h2>", f"<p>Last epoch ({epochs[-1]}):</p>",
            _table(["machine", "NIC", "device", "ranks", "images/s", "data wait"], rows),
            _img(_plots().lines(epochs, rate, "images/s per machine", "images/s"), "images/s per machine"),
            _img(_plots().lines(epochs, wait, "data wait per machine", "% of the ranks' time"),
                 "data wait per machine")]


def _per_host(history: list[dict], hosts: list[str], key: str, scale: float = 1) -> dict[str, list[float]]:
    """Each machine's `key` per epoch (NaN where an epoch ran without it: before a regrow, after a loss)."""
    def value(entry: dict, host: str) -> float:
        return next((scale * m[key] for m in entry["machines"] if m["host"] == host), np.nan)
    return {host: [value(h, host) for h in history] for host in hosts}


def _cluster(train: dict) -> list[str]:
    restarts = train.get("restarts") or []
    rows = [[i, r.get("cause", ""), r.get("epoch", ""), r.get("nodes", "")] for i, r in enumerate(restarts, 1)]
    text = (f"<p>World size {_e(train.get('world_size'))} at the end of the run; {len(restarts)} restart(s).</p>")
    return ["<h2>Cluster and restarts</h2>", text,
            _table(["restart", "cause", "from epoch", "machines after"], rows) if rows else ""]


def _classes(confusion: list, names: list[str], source: str) -> list[str]:
    n = 1 + max(max(a, b) for a, b, _ in confusion)
    matrix = np.zeros((n, n), dtype=np.int64)
    for a, b, count in confusion:
        matrix[a, b] += count
    labels = names[:n] + [str(i) for i in range(len(names), n)]
    totals = matrix.sum(axis=1)
    accuracy = np.divide(np.diag(matrix), totals, out=np.zeros(n), where=totals > 0)
    parts = [f"<h2>Classes ({_e(source)}, {int(matrix.sum())} samples)</h2>"]
    if n <= MATRIX_CLASSES:
        parts.append(_img(_plots().heatmap(matrix, labels, "confusion matrix"), "confusion matrix"))
        parts.append(_img(_plots().bars(labels, {"accuracy": accuracy}, "per-class accuracy", "top-1"),
                          "per-class accuracy"))
        return parts
    off = [(matrix[a, b], a, b) for a, b in zip(*np.nonzero(matrix)) if a != b]
    worst = sorted(off, reverse=True)[:20]
    parts.append(_table(["true", "predicted", "count"], [[labels[a], labels[b], c] for c, a, b in worst]))
    order = np.argsort(accuracy)[:20]
    rows = [[labels[i], f"{accuracy[i]:.3f}", totals[i]] for i in order]
    parts.append(_table(["class", "accuracy", "samples"], rows))
    return parts


def _config(output: str) -> str:
    path = os.path.join(output, "config.yaml")
    text = read_text(path, "config.yaml") if os.path.isfile(path) else "(no config.yaml)"
    return f"<h2>Config as run</h2><pre>{_e(text)}</pre>"


def _plots():
    from paddledist import plots  # matplotlib costs ~0.5 s to import: only when a report is drawn

    return plots
