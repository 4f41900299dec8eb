"""The fast lane stays fast: a test marked unit that starts a process fails (tests/conftest.py's audit hook),
shown on an inner pytest run of a test file that does, with this suite's own conftest and markers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

INNER = '''
import subprocess, sys
import pytest

@pytest.mark.unit
def test_pure():
    assert sum(range(4)) == 6

@pytest.mark.unit
def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.multiproc
def test_may_start_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.mark.multiproc
def test_a_unit_test_that_starts_a_process_fails_and_the_others_pass(tmp_path):
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(REPO / "tests" / "helpers", tmp_path / "helpers")  # the conftest imports from it
    shutil.copy(REPO / "pytest.ini", tmp_path / "pytest.ini")
    (tmp_path / "pytest.ini").write_text((tmp_path / "pytest.ini").read_text().replace("testpaths = tests", ""))
    (tmp_path / "test_inner.py").write_text(INNER)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE", "test_inner.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "3 passed, 1 error" in done.stdout, done.stdout[-3000:]
    assert "ERROR test_inner.py::test_starts_a_process" in done.stdout
    assert "a test marked unit started a process (subprocess.Popen" in done.stdout
