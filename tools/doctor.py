"""paddledist doctor: check a cluster before the first real job, like `accelerate test` or paddle's run_check.

    python tools/doctor.py -c configs/image_classification.yaml -o Train.dist_ips=10.0.0.1,10.0.0.2

Run the same command on every machine. It goes the way training goes (the preflight's rendezvous with its
version, config and port checks; paddle's launcher under paddledist's supervisor), then measures one 64 MiB
all-reduce across all ranks and runs a few training steps of Global.model on random data; each machine prints
one line and exits 0 when all is well. A machine that does not come is named after Train.peer_timeout seconds
(shorten it with -o Train.peer_timeout=20).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddledist.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(mode="doctor", prog="tools/doctor.py"))
