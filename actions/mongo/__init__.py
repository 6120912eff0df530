"""MongoDB backend (SPEC 5.3): backend.py runs batches; functions.py writes; reads.py reads then acts."""
