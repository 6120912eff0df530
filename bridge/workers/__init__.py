"""`hookbridge run --workers N`: N bridge processes on one shared subscription, one supervisor.
(Each worker's broker client id, and which client ids are the bridge's own: bridge/brokers/external/clientids.py.)

- layout.py: each worker's spool directory and settings; state left by a run with more workers
- checks.py: what `check` and `run` refuse (config errors) and warn about (rules needing order)
- channel.py: the private line protocol a worker answers the supervisor on (metrics, health)
- merge.py: the workers' metrics added up, their health combined
- child.py: the worker side: parent-death signal, the channel
- supervisor.py: starts, watches, restarts and stops the workers; serves /metrics and /healthz
"""
