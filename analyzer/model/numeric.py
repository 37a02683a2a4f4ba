"""numpy as the analysis loads it: with one OpenBLAS thread.

numpy's wheels bring OpenBLAS, which starts a thread per core when numpy is imported and, after numpy's own
import-time check of the library, lets it spin for a while: about 0.1 CPU s in every process that imports
numpy (docs/performance.md, "Start-up and exit"), for BLAS work the analysis never does (its fits are of a
few points).
Importing numpy from here gives OpenBLAS one thread unless the user set OPENBLAS_NUM_THREADS, and leaves the
environment as it was, so nothing specprof starts (a captured workload, a worker) inherits the setting. Where
numpy is already loaded (by torch, say) this changes nothing.
"""

from __future__ import annotations

import os
import sys

_VAR = "OPENBLAS_NUM_THREADS"

if "numpy" in sys.modules or _VAR in os.environ:
    import numpy as np
else:
    os.environ[_VAR] = "1"
    try:
        import numpy as np
    finally:
        os.environ.pop(_VAR, None)

__all__ = ["np"]
