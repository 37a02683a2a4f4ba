"""The attribution of a trace's GPU time: projection of CPU ranges onto GPU ops, kernel categories, the accounting
of every nanosecond of every stream, and the summaries; pure functions from the Trace's tables to tables."""
