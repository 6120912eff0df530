"""`hookbridge init [DIR] [--force]`: the shipped config/, rules/ and templates/ written into DIR.

A checkout has them at its top (where `run` and `check` look by default); an installed wheel
carries them as package data under bridge/_shipped/ (setup.py maps them there). `init` copies
them out so that `hookbridge check` and `hookbridge run` work in DIR as they do in a checkout.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

FOLDERS = ("config", "rules", "templates")
EXIT_REFUSED = 2


def shipped_folder(name: str) -> Path:
    """Where the shipped `name` folder is: in the installed package, or beside it in a checkout."""
    package = Path(__file__).resolve().parents[1]  # bridge/
    for candidate in (package / "_shipped" / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"the shipped {name}/ folder is in neither {package / '_shipped'} nor {package.parent}")


@dataclass(frozen=True)
class ShippedFile:
    source: Path
    relative: Path  # config/bridge.conf


def shipped_files() -> list[ShippedFile]:
    found: list[ShippedFile] = []
    for folder in FOLDERS:
        root = shipped_folder(folder)
        for source in sorted(root.rglob("*")):
            if source.is_file() and "__pycache__" not in source.parts:
                found.append(ShippedFile(source, Path(folder) / source.relative_to(root)))
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=".", help="where to write config/, rules/, templates/ (default .)")
    parser.add_argument("--force", action="store_true", help="overwrite files that differ from the shipped ones")


def run(args: argparse.Namespace) -> int:
    target = Path(args.dir)
    files = shipped_files()
    # A file already there with the shipped content is left as it is; one that differs is a user's
    # edit, overwritten only with --force. Refuse before writing anything, listing every one.
    differing = [f for f in files if _differs(target / f.relative, f.source)]
    if differing and not args.force:
        for f in differing:
            print(f"{target / f.relative}: exists and differs from the shipped file", file=sys.stderr)
        print("nothing written: add --force to overwrite these files", file=sys.stderr)
        return EXIT_REFUSED
    written = 0
    for f in files:
        destination = target / f.relative
        if destination.exists() and not _differs(destination, f.source):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(f.source.read_bytes())
        print(f"wrote {destination}")
        written += 1
    if written == 0:
        print(f"{target}: config/, rules/ and templates/ are already the shipped ones")
    where = "" if target.resolve() == Path.cwd().resolve() else f"cd {target} && "
    print(
        f"next: {where}hookbridge check && hookbridge run\n"
        "  (config/bridge.conf: the embedded MQTT broker on 127.0.0.1:1883, and rules/redis.conf's rules "
        "writing to a Redis on 127.0.0.1:6379, REDIS_SERVER=host:port for another)"
    )
    return 0


def _differs(destination: Path, source: Path) -> bool:
    """True when `destination` exists with other content than the shipped `source`."""
    return destination.exists() and destination.read_bytes() != source.read_bytes()
