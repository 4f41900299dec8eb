"""The one exception type for mistakes a user can cause (config, dataset, cluster).

Entry points catch it, print its message on one line and exit with code 2; everything else is a
bug and keeps its traceback.
"""

USER_ERROR_EXIT = 2


class UserError(Exception):
    """A problem the user can fix: the message says what is wrong, where, and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


OUTPUT_ERROR_EXIT = 3
"""Writing a result or checkpoint failed (disk full, I/O error): not a config mistake, so not 2."""


class OutputWriteError(Exception):
    """A write under Global.output failed; the message names the path, the space needed and free, and the
    partial files are already removed."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


PREEMPTED_EXIT = 75
"""Every machine exits with this code (EX_TEMPFAIL) after a preemption signal (SIGTERM or SIGUSR1 to a supervisor)
made every rank save `latest` at the same step: rerun the same command with Train.resume_path=auto to continue."""
