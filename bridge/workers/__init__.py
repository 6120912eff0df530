"""`hookbridge run --workers N`: N bridge processes on one shared subscription, one supervisor.

layout.py      each worker's broker client id and spool directory; state left by more workers
checks.py      what `check` and `run` refuse (config errors) and warn about (rules needing order)
channel.py     the private line protocol a worker answers the supervisor on (metrics, health)
merge.py       the workers' metrics added up, their health combined
child.py       the worker side: its settings, parent-death signal, the channel
supervisor.py  starts, watches, restarts and stops the workers; serves /metrics and /healthz
"""
