"""Property-based fuzzing (hypothesis, seeded) of the `-o` grammar and of YAML documents through the real loader,
and a handful through the real CLI: every input ends in a valid Config or a one-line UserError (exit 2),
never another exception, a traceback or a hang. 606 cases, about 13 s."""

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
            sub = tp.__dataclass_fields__[f.name].default_factory if f.default_factory is not dataclasses.MISSING else None
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


@seed(24)
@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(alphabet="[]{}&*:-,'\"!\n ab1", min_size=1, max_size=60),
       st.builds(lambda k, v: f"{k}={v}", keys, raw_values))
@pytest.mark.multiproc
def test_cli_error_path(tmp_path_factory, text, item):
    """The same properties through tools/train.py --dry-run: exit 0, or exit 2 with one line; no traceback."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "cfg.yaml").write_text(f"Global:\n  output: {folder / 'out'}\n  dataset_dir: {REPO / 'dataset' / 'digits'}\n"
                                     f"x: {text!r}\n" if "\n" in text else text)
    done = subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(folder / "cfg.yaml"), "-o", item,
                           "--dry-run"], cwd=folder, capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 2), done.stderr[-2000:]
    if done.returncode == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paddledist: error: "), done.stderr
    assert not (folder / "out").exists()
