"""specprof analyzer: nsys SQLite / Kineto traces -> one polars data model -> phase attribution."""

__version__ = "0.1.0"
