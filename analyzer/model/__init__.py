"""The data model: the Trace every reader produces, a run's other files parsed (`RunData`) and the settings its
server ran with (`RunSettings`), the labels the analysis gives, and the column primitives the analyses run on
(polars, and the optional C scan)."""
