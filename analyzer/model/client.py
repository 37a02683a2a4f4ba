"""What a benchmark client recorded of one run's workload (`ClientRecord`, read by readers/client.py from the serve
script's RUN/client.json), with the tracer's sidecar of the same server process beside it (`WholeRunFiles`)."""

from __future__ import annotations

from dataclasses import dataclass

from specprof.analyzer.model.sidecars import Sidecars


@dataclass(frozen=True)
class ClientRecord:
    """One run's workload as its client saw it."""

    path: str  # the client.json file
    requests: int  # responses received
    tokens: int  # output tokens over every response
    wall_ns: int  # the client's wall clock for the whole workload (first request sent to last response)
    start_ns: int | None  # when the workload started (UTC ns since the epoch; None: not recorded)
    request_ns: tuple[int, ...]  # each response's own wall clock


@dataclass(frozen=True)
class WholeRunFiles:
    """One run's client records and the sidecars of the same server process (None: none in its folder)."""

    client: ClientRecord
    sidecars: Sidecars | None
    profiled: bool  # the run was under nsys (its client's clock includes the capture's own start and stop)
