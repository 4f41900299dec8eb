"""The script paddle.distributed.launch starts in every worker process (it runs `python <file>.py args`).

Part of the package, so an installed wheel trains without a source checkout's tools/. Run as a file, Python
puts this folder first on sys.path, where paddledist's own subpackages (config, data, models...) would shadow
top-level modules of the same names; the package's parent folder goes there instead.
"""

import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(here))
    from paddledist.cli import main

    sys.exit(main(prog="paddledist worker"))
