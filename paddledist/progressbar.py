"""Progress of downloads and long evaluations: a tqdm bar on a terminal; elsewhere (job scripts, logs, a
launched worker's log file) plain lines, at most one per interval, that read well in a log and grep well."""

from __future__ import annotations

import time
from typing import Callable, Optional, TextIO

from tqdm import tqdm


def is_terminal(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty()


class Meter:
    """`update(n)` as work is done, `close()` at the end. On a terminal a tqdm bar on `out`; else `line(done)` is
    written as one line at most every `interval` seconds (None: nothing in between)."""

    def __init__(self, out: TextIO, total: Optional[int], desc: str, line: Optional[Callable[[int], str]] = None,
                 interval: float = 10.0, **bar) -> None:
        self.out, self.line, self.interval, self.done = out, line, interval, 0
        self.bar = tqdm(total=total or None, desc=desc, file=out, leave=False, **bar) if is_terminal(out) else None
        self.shown = time.monotonic()

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.line and time.monotonic() - self.shown >= self.interval:
            self.out.write(self.line(self.done) + "\n")
            self.out.flush()
            self.shown = time.monotonic()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
