"""Packaging beyond pyproject.toml: the shipped config/, rules/ and templates/ go into the wheel,
and the per-message path is compiled with mypyc.

They stay at the top of the checkout, where `hookbridge run` and `check` look by default, and the
wheel carries them as package data of `bridge._shipped.config`, `.rules` and `.templates`, which
`hookbridge init DIR` copies out (bridge/ops/init.py). pyproject.toml alone cannot both find the
packages and map folders from outside them into one, hence this file; everything else is there.

The compiled build (docs/development.md#the-compiled-build): a wheel, an sdist install or the
image compiles the modules bridge/extensions.py lists into C extensions with mypyc (a build
requirement in pyproject.toml). Not compiled: an editable install (`pip install -e .`, what
scripts/test.sh does), so an edit to a .py file is never shadowed by an extension built from
its older text; and any build with HOOKBRIDGE_NO_EXTENSIONS=1. Where mypyc or the C compiler
fails, or no compiler is there, the build warns and the wheel is pure Python: it always installs
(tests/packaging/test_compiled_build.py fails then, as the extensions are missing).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent

SHIPPED = {f"bridge._shipped.{folder}": folder for folder in ("config", "rules", "templates")}
# Each folder's subfolders (templates/redis/, ...) as packages of their own: setuptools' way to carry a tree.
SHIPPED_TREE = [
    *SHIPPED,
    *(f"{package}.{sub}" for package, folder in SHIPPED.items() for sub in find_namespace_packages(where=folder)),
]


def extensions_module() -> Any:
    """bridge/extensions.py, loaded by its path (importing the `bridge` package would need its
    dependencies, which a build environment does not have)."""
    spec = importlib.util.spec_from_file_location("_hookbridge_extensions", HERE / "bridge" / "extensions.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiled_modules() -> list[Extension]:
    """What this build compiles: one stand-in for the mypyc extensions (OptionalBuildExt makes
    them), so that the wheel is marked as holding compiled code; none for a pure-Python build."""
    if extensions_module().disabled():
        return []
    return [Extension("hookbridge__mypyc", sources=[])]


class OptionalBuildExt(build_ext):
    """Compiles the modules of bridge/extensions.py with mypyc when a build runs (writing the
    metadata or an editable install never runs mypy).

    - An editable install (`pip install -e .`) stays pure Python: its extensions would sit beside
      the checkout's .py files and shadow every later edit of them.
    - Where the extensions cannot be built (mypyc refuses a module, no C compiler, no Python
      headers), a warning, and none of them in the wheel: it is pure Python and still installs.
      All or nothing: mypyc's modules share one library, so a part of them would not import.
    """

    def _mypyc_extensions(self) -> list[Extension]:
        if not self.distribution.ext_modules:  # HOOKBRIDGE_NO_EXTENSIONS: compiled_modules() said none
            return []
        commands = set(self.distribution.commands)
        if not commands & {"bdist_wheel", "build", "build_ext", "install"}:
            # Writing metadata (egg_info, dist_info) asks for this command's source files too:
            # a stand-in list, no mypy run.
            return self.distribution.ext_modules
        # `pip install -e` runs the editable_wheel command (PEP 660); `develop` is the older way.
        if commands & {"editable_wheel", "develop"} or self.editable_mode or self.inplace:
            print("hookbridge: editable install: pure Python, nothing compiled", file=sys.stderr)
            return []
        try:
            from mypyc.build import mypycify
        except ImportError:  # `python setup.py ...` outside a PEP 517 build, without mypy installed
            print("hookbridge: WARNING: mypyc is not installed: this build is pure Python", file=sys.stderr)
            return []
        sources = [name.replace(".", "/") + ".py" for name in extensions_module().COMPILED]
        # The build environment has none of the runtime dependencies: imports of them are typed
        # Any here (the checkout's own mypy run checks them fully).
        options = ["--ignore-missing-imports", "--no-warn-unused-ignores", "--follow-imports=silent"]
        try:
            return list(mypycify([*options, *sources], group_name="hookbridge", opt_level="3"))
        except (Exception, SystemExit) as exc:  # mypyc refuses a module: it says why above, and exits
            print(f"hookbridge: WARNING: mypyc failed ({exc!r}); this build is pure Python", file=sys.stderr)
            return []

    def finalize_options(self) -> None:
        # Before setuptools' own, which prepares each extension of the list.
        self.distribution.ext_modules = self._mypyc_extensions()
        super().finalize_options()

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # a compiler's failure comes in many types
            for extension in self.extensions:
                Path(self.get_ext_fullpath(extension.name)).unlink(missing_ok=True)
            self.extensions = self.distribution.ext_modules = []
            print(f"hookbridge: WARNING: compiling failed ({exc}); this build is pure Python", file=sys.stderr)


setup(
    packages=[*find_namespace_packages(include=["bridge*", "actions*", "spark_analytics*"]), *SHIPPED_TREE],
    package_dir=SHIPPED,
    package_data={
        # The dashboard's page, script and style (bridge/api/static/), served by the bridge as they are.
        "bridge.api": ["static/*"],
        **{package: ["*.conf", "*.j2"] for package in SHIPPED_TREE},
    },
    ext_modules=compiled_modules(),
    cmdclass={"build_ext": OptionalBuildExt},
)
