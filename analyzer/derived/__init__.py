"""Analyses built on the attribution and on the tables of the run's other files (pure: they read no file): the
cross-check against the tracer's sidecar, the economics of speculation, per-rank results, the sweep over draft
steps, the comparison of two runs; and `Analysis`, the attribution with what they add, each on first use."""
