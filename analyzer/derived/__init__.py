"""Analyses built on the attribution and on the tables of the run's other files (pure: they read no file): the
cross-check against the tracer's sidecar, the economics of speculation, the draft's shape from the run's settings,
per-rank results, the sweep over draft steps, the comparison of two runs; and `Analysis`, the attribution with
every value they add, made at once (`analyse`)."""
