"""A tool fixes its stage and a section is set key by key: `tools/train.py -o Global.mode=foo` and `-o Train=`
were silent (the first trained anyway, the second did nothing); both are one line and exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddledist import cli

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.unit



@pytest.mark.parametrize("tool,override", [("train", "Global.mode=foo"), ("train", "Global.mode=evaluate"),
                                           ("eval", "Global.mode=[train,evaluate]"),
                                           ("train", "Global.mode=train,export")])
def test_a_tools_fixed_stage_is_not_silently_replaced_by_global_mode(tool, override, tmp_path, monkeypatch, capsys):
    """tools/train.py -o Global.mode=foo trained anyway; now it says which stage the tool runs, exit 2."""
    monkeypatch.chdir(tmp_path)
    mode = {"train": "train", "eval": "evaluate"}[tool]
    code = cli.main(["-c", str(REPO / "configs" / "image_classification.yaml"), "-o", override, "--dry-run"],
                    mode=mode, prog=f"tools/{tool}.py")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"tools/{tool}.py runs the {mode} stage, but -o {override} asks for another" in err
    assert list(tmp_path.iterdir()) == []


def test_the_tools_own_stage_named_again_is_fine():
    for override in ("Global.mode=train", "Global.mode=[train]", "Global.mode= train "):
        cli.check_fixed_mode("tools/train.py", "train", [override])
    cli.check_fixed_mode("tools/main.py", None, ["Global.mode=[check_dataset,train]"])


@pytest.mark.parametrize("section", ["Train=", "Global=null", "Evaluate={}"])
def test_a_whole_section_set_from_the_command_line_is_an_error_not_a_no_op(section, capsys):
    code = cli.main(["-c", str(REPO / "configs" / "image_classification.yaml"), "-o", section, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "is a section; set one of its keys" in err and err.count("\n") == 1, err
