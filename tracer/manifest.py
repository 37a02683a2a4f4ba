"""What a run directory says about itself: `manifest.json` (schema `specprof.run/1`).

Facts about the capturing machine (GPUs, host, package versions) and about the run directory (which files
exist). Nothing here imports torch or SGLang: versions come from importlib.metadata.
"""

from __future__ import annotations

import csv
import importlib
import json
import shutil
import socket
import subprocess
from pathlib import Path

from specprof.analyzer import safe_files

SCHEMA = "specprof.run/1"
MANIFEST = "manifest.json"

NVIDIA_SMI_QUERY = ("--query-gpu=index,name,uuid,driver_version,memory.total", "--format=csv,noheader")
GPU_FIELDS = ("index", "name", "uuid", "driver_version", "memory_total")


def gpus() -> list[dict]:
    """The GPUs nvidia-smi lists, or [] where there is no nvidia-smi or it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return parse_gpus(done.stdout)


def parse_gpus(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader`."""
    rows = []
    for cells in csv.reader(line for line in text.splitlines() if line.strip()):
        if len(cells) != len(GPU_FIELDS):
            continue
        row = dict(zip(GPU_FIELDS, (cell.strip() for cell in cells)))
        row["index"] = int(row["index"]) if row["index"].isdigit() else row["index"]
        rows.append(row)
    return rows


def package_version(name: str) -> str | None:
    """The installed version of a distribution in this (the capturing) Python, or None when absent."""
    import importlib.metadata  # when asked, not at start-up: `specprof --help` would pay 12 ms for it

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def host() -> str:
    return socket.gethostname()


def write(run_dir: Path, manifest: dict) -> Path:
    """Writes `manifest.json` into `run_dir` as a new file renamed over the name (a link there is refused, never
    written through: specprof.analyzer.safe_files)."""
    path = run_dir / MANIFEST
    safe_files.replace(path, json.dumps(manifest, indent=2) + "\n")
    return path
