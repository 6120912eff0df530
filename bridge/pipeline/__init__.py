"""The path of an event from the broker source to the databases, and back for the reads.

dispatcher.py (the sink every source feeds) -> engine.py (the rules of the event) -> runner.py
(one per pool) -> lanes.py (ordering lanes, each with its spool/ on disk) -> the backend's batch;
pager.py sends fetched pages as the subscriber acks them; deadletter.py keeps the actions that
failed for good.
"""
