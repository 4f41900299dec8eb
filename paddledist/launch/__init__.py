"""Launch: the launcher command as a value (builder), its supervised run (runner), and the stage-facing API.

Imports nothing of paddle: it must start fast and work where paddle's GPU build is absent.
"""

from paddledist.launch.builder import build, command_line, env_changes, log_dir
from paddledist.launch.runner import run
from paddledist.launch.stage import Launched, in_worker, is_first_machine, launch_stage, needs_launch

__all__ = ["Launched", "build", "command_line", "env_changes", "in_worker", "is_first_machine", "launch_stage",
           "log_dir", "needs_launch", "run"]
