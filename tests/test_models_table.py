"""docs/models.md is the registry's table, as `python -m paddledist.models.table` renders it now."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddledist.models import REGISTRY
from paddledist.models.table import param_count, render

pytestmark = pytest.mark.models
REPO = Path(__file__).resolve().parent.parent


def test_committed_model_table_matches_the_registry():
    committed = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    assert committed == render(), "run: python -m paddledist.models.table > docs/models.md"


def test_every_registered_model_has_a_row():
    rows = [line.split(" | ")[0][2:] for line in render().splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == list(REGISTRY)


def test_lazy_parameter_count_equals_a_real_build():
    # The table builds under paddle.LazyGuard; a real build of a small model gives the same trainable count.
    import paddle

    from paddledist.models import build_model

    for name in ("PP-LCNet_x0_25", "LeNet"):
        spec = REGISTRY[name]
        real = build_model(name, spec.cfg.num_classes, spec.cfg.input_size)
        trained = [p for p in real.parameters() if not p.stop_gradient]
        assert param_count(spec) == sum(int(p.numel()) for p in trained) > 0
    assert paddle.in_dynamic_mode()  # LazyGuard left nothing behind
