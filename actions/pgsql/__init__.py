"""PostgreSQL backend (SPEC 5.2): backend.py runs batches; functions.py writes; reads.py reads then acts."""
