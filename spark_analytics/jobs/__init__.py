"""The reports, each one module: NAME, NEEDED, extract, transform, page."""

from __future__ import annotations

from types import ModuleType

from spark_analytics.jobs import sessions, traffic

REPORTS: dict[str, ModuleType] = {"sessions": sessions, "traffic": traffic}
