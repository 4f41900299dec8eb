"""The script paddle.distributed.launch starts in every worker process (it runs `python <file>.py args`).

Part of the package, so an installed wheel trains without a source checkout's tools/; the package's parent
folder, not this one, goes first on sys.path (paddledist's subpackages would shadow top-level modules).
A finished worker leaves through `leave`: exit handlers run and output is flushed, then the process ends
without the C-level teardown, whose paddle destructors crashed about 1 job in 30 under load (TCP-store thread
still serving, then MKL's finaliser: SIGSEGV) after everything was written: docs/design_notes.md, "Worker exit"."""

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
