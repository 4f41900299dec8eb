"""paddledist: PaddleX-style declarative, data-parallel image-classification training across machines."""

__version__ = "0.1.0"
