"""MySQL / MariaDB backend (SPEC 5.5): backend.py runs batches; functions.py writes; reads.py reads then acts."""
