"""specprof analyzer: nsys SQLite / Kineto traces -> one polars data model -> phase attribution."""

import os as _os

from specprof import __version__  # noqa: F401 (one version, the package's)

# polars allocates through its own jemalloc, which by default first hands freed pages back lazily
# (MADV_FREE): they stay in the process's resident memory until the kernel needs them. Returning
# them at once costs nothing measurable and lowers the peak RSS of a 10 M-op analysis by 0.15 to
# 0.2 GB (docs/performance.md). jemalloc reads this when polars is first imported; a value the
# user set is kept.
_os.environ.setdefault("_RJEM_MALLOC_CONF", "muzzy_decay_ms:0")
