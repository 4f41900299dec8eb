"""paddledist check_dataset:
`python tools/check_dataset.py -c configs/image_classification.yaml [-o Section.key=value ...] [--dry-run]`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(mode="check_dataset", prog="tools/check_dataset.py"))
