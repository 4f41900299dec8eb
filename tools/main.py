"""Run the stages that `Global.mode` names (one mode or a list), like PaddleX's main.py.

    python tools/main.py -c configs/image_classification.yaml -o Global.mode=[check_dataset,train,evaluate,export]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="tools/main.py"))
