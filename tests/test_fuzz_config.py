"""Property-based fuzzing (hypothesis, seeded) of the `-o` grammar and of YAML documents through the real loader,
200 cases through the CLI's entry in-process and a handful through tools/train.py: every input ends in a valid
Config or a one-line UserError (exit 2), never another exception, a traceback or a hang. 806 cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from paddledist.config import Config, load
from paddledist.config.schema import Config as Schema
from paddledist.errors import UserError

REPO = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=150, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _keys() -> list[str]:
    import dataclasses

    found = []

    def walk(tp, prefix):
        for f in dataclasses.fields(tp):
            sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if sub is not None and dataclasses.is_dataclass(sub):
                walk(sub, f"{prefix}{f.name}.")
            else:
                found.append(f"{prefix}{f.name}")
    walk(Schema, "")
    return found


KEYS = _keys()
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=30))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
raw_values = st.one_of(st.text(max_size=40), st.sampled_from(["", "null", "~", "???", "${oc.env:HOME}", "[", "{a: b",
                                                              "1e-3", "0x10", "-1", "1e400", "nan", "&a [*a]",
                                                              "!!python/object:os.system", "a=b=c", "[1, [2, [3]]]"]))
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=20),
                 st.builds(lambda k, s: k + s, st.sampled_from(KEYS), st.sampled_from([".x", ".", "..", " ", "x"])))


def ends_well(fn) -> object:
    """Call `fn`; a Config or a one-line UserError is fine, anything else fails the property."""
    try:
        cfg = fn()
    except UserError as e:
        assert "\n" not in str(e) and str(e).strip(), repr(str(e))
        return e
    assert isinstance(cfg, Config)
    return cfg


@pytest.mark.unit
@seed(20)
@FAST
@given(st.lists(st.builds(lambda k, v: f"{k}={v}", keys, raw_values), max_size=4))
def test_override_grammar(items):
    ends_well(lambda: load(None, items))


@pytest.mark.unit
@seed(21)
@FAST
@given(st.lists(st.text(max_size=30), max_size=3))
def test_override_items_without_structure(items):
    ends_well(lambda: load(None, items))


@seed(22)
@FAST
@given(st.dictionaries(st.one_of(st.sampled_from(["Global", "Train", "Evaluate", "Export", "Predict", "CheckDataset"]),
                                 st.text(max_size=8)),
                       st.one_of(values, st.dictionaries(st.sampled_from([k.split(".", 1)[1] for k in KEYS]), values,
                                                         max_size=5)),
                       max_size=4))
@pytest.mark.unit
def test_yaml_documents(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "cfg.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    ends_well(lambda: load(str(path)))


@seed(23)
@FAST
@given(st.one_of(st.text(max_size=200),
                 st.text(alphabet="[]{}&*:-,'\"!|>#%@`\n ab1", max_size=200),
                 st.binary(max_size=200)))
@pytest.mark.unit
def test_yaml_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "cfg.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    ends_well(lambda: load(str(path)))


def fuzzed_config(folder: Path, text: str) -> Path:
    """A valid start (output and data in `folder`) with the fuzzed text after it: new sections, broken syntax,
    a second Global block, a dangling indent..."""
    path = folder / "cfg.yaml"
    path.write_text(f"Global:\n  output: {folder / 'out'}\n  dataset_dir: {REPO / 'dataset' / 'digits'}\n{text}")
    return path


PLAIN_VALUES = st.one_of(st.integers(0, 64).map(str), st.sampled_from(["true", "false", "None", "0.1", "cpu", "cpu:0,1",
                                                                       "[]", "default", "10.0.0.1,10.0.0.2"]))
"""Values of the kinds real keys take, so that a good share of the cases is a valid config."""
YAML_TEXT = st.text(alphabet="[]{}&*:-,'\"!|>#\n ab1", min_size=1, max_size=80)


@seed(25)
@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(YAML_TEXT, st.sampled_from(["", "Train:\n  batch_size: 8\n", "Global:\n  seed: 3\n",
                                             "Train:\n  epochs_iters: 1\n  augment: false\n",
                                             "Evaluate:\n  weight_path: None\n"])),
       st.lists(st.builds(lambda k, v: f"{k}={v}", st.one_of(st.sampled_from(KEYS), keys),
                          st.one_of(PLAIN_VALUES, raw_values)), max_size=2))
@pytest.mark.unit
def test_cli_error_path_in_process(tmp_path_factory, capsys, text, items):
    """cli.main --dry-run, as tools/train.py calls it: exit 0, or exit 2 with one line on stderr; no exception
    escapes, and nothing is written (the working folder holds the config only)."""
    from paddledist import cli

    folder = tmp_path_factory.mktemp("cli")
    config = fuzzed_config(folder, text)
    here = os.getcwd()
    os.chdir(folder)
    try:
        code = cli.main(["-c", str(config), *(["-o", *items] if items else []), "--dry-run"], mode="train", prog="t")
    finally:
        os.chdir(here)
    err = capsys.readouterr().err
    assert code in (0, 2), err[-2000:]
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), err
    assert sorted(os.listdir(folder)) == ["cfg.yaml"]


@seed(24)
@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(YAML_TEXT, st.builds(lambda k, v: f"{k}={v}", keys, raw_values))
@pytest.mark.multiproc
def test_cli_error_path(tmp_path_factory, text, item):
    """The same through tools/train.py --dry-run in its own process: no traceback on either stream."""
    folder = tmp_path_factory.mktemp("cli")
    config = fuzzed_config(folder, text)
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(config), "-o", item,
                           "--dry-run"], cwd=folder, capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 2), done.stderr[-2000:]
    if done.returncode == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), done.stderr
    assert sorted(os.listdir(folder)) == ["cfg.yaml"]
