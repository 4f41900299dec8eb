"""The script paddle.distributed.launch starts in every worker process (it runs `python <file>.py args`).

Part of the package, so an installed wheel trains without a source checkout's tools/. Run as a file, Python
puts this folder first on sys.path, where paddledist's own subpackages (config, data, models...) would shadow
top-level modules of the same names; the package's parent folder goes there instead.

A worker that finished leaves through `leave`: Python's exit handlers run (paddle's own, the data loader's
shared-memory clean-up), output is flushed, and the process ends without the C-level teardown that follows.
That teardown ran the C++ static destructors of paddle while rank 0's TCP-store daemon thread was still
serving: the daemon saw its connections break mid-teardown and aborted, and the main thread then crashed in
MKL's finaliser (SIGSEGV, exit -11) after the rank had written everything (about 1 finished 2-process job in
30 under load; a core dump showed both threads). Everything a run keeps is written atomically and fsynced
before this point, so nothing is lost by skipping it.
"""

import os
import sys


def leave(code: int) -> None:
    """End this worker with `code` after Python's exit handlers, without the C-level teardown."""
    import atexit
    import logging

    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(here))
    from paddledist.cli import main

    leave(main(prog="paddledist worker"))
