"""Write the analysis tables as CSV or Parquet files, one file per table (times in ns)."""

from __future__ import annotations

import os

from analyzer.core.attribution import Attribution
from analyzer.errors import SpecprofError

TABLES = ("phases", "categories", "cycles", "cycle_phases", "launch", "streams", "devices",
          "kernels", "unattributed", "ranges", "ops", "segments")


def write(a: Attribution, directory: str, fmt: str) -> list[str]:
    """Write every table to `directory` as `<table>.csv` or `<table>.parquet`; returns the paths."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise SpecprofError(f"{directory}: cannot create the output folder ({exc.strerror})", directory) from None
    paths = []
    for name in TABLES:
        df = getattr(a, name)
        path = os.path.join(directory, f"{name}.{fmt}")
        try:
            if fmt == "csv":
                df.write_csv(path)
            else:
                df.write_parquet(path)
        except OSError as exc:
            raise SpecprofError(f"{path}: cannot write ({exc.strerror})", path) from None
        paths.append(path)
    return paths
