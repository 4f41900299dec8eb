"""Regenerate docs/report.png, the picture of a run report that README shows.

    python scripts/report_screenshot.py                 # trains the default job (about 30 s) into a temp folder
    python scripts/report_screenshot.py --output DIR    # a finished run's Global.output instead

Needs Debian's chromium (`apt-get install chromium`); the page is rendered headless from its file:// URL.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def train_default(folder: Path) -> Path:
    output = folder / "output"
    subprocess.run([sys.executable, str(REPO / "tools" / "train.py"), "-c", str(REPO / "configs" /
                    "image_classification.yaml"), "-o", f"Global.output={output}"],
                   check=True, cwd=REPO)
    return output


def screenshot(report: Path, target: Path, folder: Path) -> None:
    browser = shutil.which("chromium")
    if browser is None:
        sys.exit("scripts/report_screenshot.py: chromium is not installed (apt-get install chromium)")
    subprocess.run([browser, *FLAGS, f"--user-data-dir={folder / 'profile'}", "--window-size=1100,1500",
                    "--hide-scrollbars", f"--screenshot={target}", report.as_uri()], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="a finished run's Global.output (default: train one)")
    parser.add_argument("--to", type=Path, default=REPO / "docs" / "report.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or train_default(Path(tmp))
        subprocess.run([sys.executable, "-m", "paddledist", "report", str(output)], check=True, cwd=REPO)
        screenshot(output / "report.html", args.to, Path(tmp))
    print(f"wrote {args.to}")


if __name__ == "__main__":
    main()
