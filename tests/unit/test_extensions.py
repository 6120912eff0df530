"""The checkout runs its .py files: no C extension sits beside them (docs/development.md#the-compiled-build).

An extension module wins over the .py of the same name on import, so one left in the checkout (a
`build_ext --inplace`, an editable install that compiled) would silently run older code than the
source a developer edits and the tests read. setup.py never compiles an editable install; this
test fails if something did anyway, naming the files to delete.
"""

from __future__ import annotations

import importlib

from bridge.extensions import COMPILED, is_compiled
from support.services import ROOT


def test_no_extension_module_in_the_checkout() -> None:
    stray = sorted(
        str(path.relative_to(ROOT))
        for package in ("bridge", "actions", "spark_analytics")
        for path in (ROOT / package).rglob("*.so")
    )
    assert stray == [], f"delete these (they shadow the .py files beside them): {stray}"


def test_the_checkout_imports_the_sources_of_the_compiled_modules() -> None:
    for name in COMPILED:
        module = importlib.import_module(name)
        assert not is_compiled(module) and module.__file__ is not None and module.__file__.endswith(".py"), name
