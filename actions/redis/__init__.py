"""Redis backend (SPEC 5.1): backend.py runs batches; functions.py writes; reads.py reads then acts."""
