"""The WRITERS shape (bridge/backend.py): one table of the write functions, declared once, which
every backend of the project fills; with the read-then-act functions it covers the function set."""

from __future__ import annotations

import importlib

import pytest

from bridge.backend import Job, writers
from bridge.fetch import READERS
from bridge.functions import FUNCTIONS


def _nothing(job: Job) -> list[str]:
    return []


def _other(job: Job) -> list[str]:
    return ["other"]


KINDS = dict(
    connected=_nothing,
    disconnected=_nothing,
    publish=_nothing,
    retain=_nothing,
    retain_delete=_nothing,
    acked_for_queue=_nothing,
    acked_for_pubsub=_nothing,
    acked_delete=_nothing,
    event_log=_nothing,
)
NAMES = set(writers(**KINDS))


def test_the_writers_and_the_readers_are_the_function_set() -> None:
    assert NAMES.isdisjoint(READERS)
    assert NAMES | set(READERS) == {spec.impl_name for spec in FUNCTIONS.values()}


def test_store_is_publish_unless_given() -> None:
    assert writers(**KINDS)["on_message_store"] is _nothing
    assert writers(**KINDS, store=_other)["on_message_store"] is _other


@pytest.mark.parametrize("db", ["redis", "pgsql", "mysql", "mongo", "cassa"])
def test_every_backend_fills_the_one_table(db: str) -> None:
    functions = importlib.import_module(f"actions.{db}.functions")
    backend = importlib.import_module(f"actions.{db}.backend")
    assert set(functions.WRITERS) == NAMES
    backend_class = next(
        value for name, value in vars(backend).items() if name.endswith("Backend") and getattr(value, "db", None) == db
    )
    assert backend_class.functions == frozenset(NAMES) | frozenset(READERS)
