"""Analyses built on the attribution and on the run's other files: the cross-check against the tracer's sidecar,
the economics of speculation, per-rank results, the sweep over draft steps, the comparison of two runs; and
`Analysis`, the attribution with what they add."""
