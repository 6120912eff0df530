"""Packaging beyond pyproject.toml: the shipped config/, rules/ and templates/ go into the wheel.

They stay at the top of the checkout, where `hookbridge run` and `check` look by default, and the
wheel carries them as package data of `bridge._shipped.config`, `.rules` and `.templates`, which
`hookbridge init DIR` copies out (bridge/ops/init.py). pyproject.toml alone cannot both find the
packages and map folders from outside them into one, hence this file; everything else is there.
"""

from setuptools import find_namespace_packages, setup

SHIPPED = {f"bridge._shipped.{folder}": folder for folder in ("config", "rules", "templates")}
# Each folder's subfolders (templates/redis/, ...) as packages of their own: setuptools' way to carry a tree.
SHIPPED_TREE = [
    *SHIPPED,
    *(f"{package}.{sub}" for package, folder in SHIPPED.items() for sub in find_namespace_packages(where=folder)),
]

setup(
    packages=[*find_namespace_packages(include=["bridge*", "actions*", "spark_analytics*"]), *SHIPPED_TREE],
    package_dir=SHIPPED,
    package_data={
        # The dashboard's page, script and style (bridge/api/static/), served by the bridge as they are.
        "bridge.api": ["static/*"],
        **{package: ["*.conf", "*.j2"] for package in SHIPPED_TREE},
    },
)
