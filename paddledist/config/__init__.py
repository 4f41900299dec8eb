"""Config: typed schema, loading, `-o` overrides, validation. Imports nothing else of the project but errors."""

from paddledist.config.device import DeviceSpec, parse_device
from paddledist.config.loader import load
from paddledist.config.nodecount import NodeCount, parse_nnodes
from paddledist.config.schema import MODES, Config
from paddledist.config.dump import to_yaml

__all__ = ["Config", "DeviceSpec", "MODES", "NodeCount", "load", "parse_device", "parse_nnodes", "to_yaml"]
