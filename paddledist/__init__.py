"""paddledist: PaddleX-style declarative, data-parallel image-classification training across machines."""

__version__ = "0.1.0"

import warnings

# paddle warns on import when ccache is absent (it only matters for compiling custom C++ ops); left in,
# that warning would be the first line of every error message a user sees.
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
