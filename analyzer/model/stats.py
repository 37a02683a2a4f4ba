"""The one quantile rule every statistic a user sees is computed by (derived/views.py, the summaries' launch latency
percentiles, the cross-check's |diff| p90): linear interpolation between the two nearest ranks (numpy's and
polars' default; the p50 is the median)."""

QUANTILE = "linear"
