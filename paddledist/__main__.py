import sys

from paddledist.cli import main

sys.exit(main(prog="python -m paddledist"))
