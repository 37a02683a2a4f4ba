"""Many traces at once: one process per file on this machine (`--jobs N`), or the same function on a Dask
cluster the user points at (`--dask tcp://host:8786`, `dask.distributed.Client.map` over the files). No
scheduler of specprof's own: a process pool or Dask does the scheduling (docs/multirank.md, "Many ranks or
many runs").

`map_paths(work, paths, ...)` runs `work(path, *args)` for every path and returns the results in the order of
the paths, whatever the order the work ran in. `work` and its arguments must be picklable, and so must what it
returns: app/traces.py's unit of work returns a small digest of one trace's analysis, never its op tables.

With Dask, every worker must see the files under the same paths (a shared file system) and have specprof
installed.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from specprof.analyzer.errors import SpecprofError

CONNECT_TIMEOUT = "30s"  # how long to try reaching a Dask scheduler


def map_paths(work, paths: list[str], *args, jobs: int = 1, dask=None, done=None) -> list:
    """`work(path, *args)` over every path: in this process (jobs=1), one process per file in a pool of `jobs`,
    or on the Dask scheduler at `dask` (an address, or a dask.distributed.Client already connected). The
    results come back in the order of `paths`; `done()` (when given) is called as each one is in."""
    done = done or (lambda: None)
    if dask:
        return _on_dask(work, paths, args, dask, done)
    results = []
    if jobs <= 1 or len(paths) == 1:
        for p in paths:
            results.append(work(p, *args))
            done()
        return results
    import multiprocessing

    # spawn: a fresh interpreter per worker (polars' thread pool does not survive fork)
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        for r in pool.map(work, paths, *[[a] * len(paths) for a in args]):
            results.append(r)
            done()
    return results


def _on_dask(work, paths: list[str], args: tuple, scheduler, done) -> list:
    try:
        from dask.distributed import Client
    except ImportError:
        raise SpecprofError("--dask needs Dask's distributed scheduler: pip install 'specprof[dist]'") from None
    owned = isinstance(scheduler, str)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT) if owned else scheduler
    except (OSError, TimeoutError) as exc:
        raise SpecprofError(f"--dask {scheduler}: cannot reach the Dask scheduler ({exc})") from None
    try:
        # pure=False: each call analyses (the same file given twice is analysed twice, as without Dask)
        futures = client.map(work, paths, *[[a] * len(paths) for a in args], pure=False)
        results = []
        for f in futures:
            results.append(client.gather(f))
            done()
        return results
    finally:
        if owned:
            client.close()
