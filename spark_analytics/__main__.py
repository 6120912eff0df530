"""`python -m spark_analytics ...`, or `spark-submit spark_analytics/__main__.py ...` from a checkout."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script: its folder comes first on sys.path (where page.py
    # and the others would shadow same-named modules); the checkout's root is what must be there.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))

from spark_analytics.cli import main

sys.exit(main())
