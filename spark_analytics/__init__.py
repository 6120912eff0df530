"""Spark analytics over the tables the bridge writes (docs/reports.md): the `sessions` and `traffic` reports.

Every report is split in three (STYLE 9): `extract` reads a source's tables for a time window,
pushing the window down to the database; `transforms` are pure DataFrame -> DataFrame functions,
tested on small hand-made DataFrames; `load` writes Parquet, CSV and a self-contained HTML page.
"""
