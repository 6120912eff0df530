"""A Dockerfile replayed without a Docker engine (none runs where this project is tested).

`replay` reads the Dockerfile and carries out its steps into a fresh folder standing for the
image's `/`, with a fresh virtualenv standing for the image's Python: COPY from the build context,
WORKDIR, `RUN pip install` with that virtualenv's pip, `RUN rm -rf`, `RUN useradd` (recorded: the
user and its home folder), USER, ENTRYPOINT and CMD. Any other instruction or command is refused
with its line, so that a Dockerfile step the replay cannot check fails the test instead of being
skipped. Paths the image would see (`/etc/hookbridge/bridge.conf`) map to the folder (`Image.path`).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from support.installed import clean_environment, fresh_virtualenv


class ReplayError(Exception):
    pass


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: COPY, RUN, ...
    arguments: str
    line: int  # where it starts in the Dockerfile


def parse(text: str) -> list[Instruction]:
    """The instructions, continuation lines (a trailing backslash) joined, comments left out."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = number
        pending.append(line.rstrip().removesuffix("\\"))
        if line.rstrip().endswith("\\"):
            continue
        keyword, _, arguments = " ".join(part.strip() for part in pending).partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
        pending = []
    return instructions


@dataclass
class Image:
    """What a replay built: the folder standing for `/`, the virtualenv standing for the image's Python."""

    root: Path
    bin_dir: Path
    base: str = ""
    workdir: str = "/"
    user: str = "root"
    users: dict[str, str] = field(default_factory=dict)  # name -> home, from `useradd`
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)

    def path(self, image_path: str) -> Path:
        """Where an absolute path of the image (or one relative to WORKDIR) is in the folder."""
        absolute = PurePosixPath(self.workdir) / image_path
        return self.root / str(absolute).lstrip("/")

    def argv(self) -> list[str]:
        """ENTRYPOINT + CMD, the program found on the image's PATH, absolute paths mapped."""
        program, *args = self.entrypoint + self.cmd
        found = shutil.which(program, path=str(self.bin_dir))
        if found is None:
            raise ReplayError(f"ENTRYPOINT {program}: not installed by the image's steps")
        return [found, *(str(self.path(arg)) if arg.startswith("/") else arg for arg in args)]


def replay(dockerfile: Path, context: Path, where: Path) -> Image:
    image = Image(root=where / "root", bin_dir=fresh_virtualenv(where / "python"))
    image.root.mkdir()
    for step in parse(dockerfile.read_text()):
        carry_out = _STEPS.get(step.keyword)
        if carry_out is None:
            raise ReplayError(f"{dockerfile}:{step.line}: the replay does not know {step.keyword}")
        try:
            carry_out(image, step.arguments, context)
        except ReplayError as exc:
            raise ReplayError(f"{dockerfile}:{step.line}: {exc}") from None
    return image


def _from(image: Image, arguments: str, _context: Path) -> None:
    image.base = arguments
    python = f"python:{sys.version_info.major}.{sys.version_info.minor}"
    if not re.fullmatch(rf"{re.escape(python)}(-slim)?(-\w+)?", arguments):
        raise ReplayError(f"FROM {arguments}: the replay's virtualenv stands for {python} only")


def _workdir(image: Image, arguments: str, _context: Path) -> None:
    image.workdir = str(PurePosixPath(image.workdir) / arguments)
    image.path(image.workdir).mkdir(parents=True, exist_ok=True)


def _copy(image: Image, arguments: str, context: Path) -> None:
    words = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
    if any(word.startswith("--") for word in words):
        raise ReplayError(f"COPY {arguments}: options are not replayed")
    *sources, destination = words
    into_folder = destination.endswith("/") or len(sources) > 1
    target = image.path(destination)
    for source in sources:
        found = context / source
        if not found.exists():
            raise ReplayError(f"COPY {source}: not in the build context")
        if found.is_dir():  # Docker copies a folder's contents, not the folder itself
            shutil.copytree(found, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (target / found.name if into_folder else target).parent.mkdir(parents=True, exist_ok=True)
            if into_folder:
                target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, target / found.name if into_folder else target)


def _run(image: Image, arguments: str, _context: Path) -> None:
    if arguments.startswith("["):
        raise ReplayError("RUN in exec form is not replayed")
    for command in arguments.split("&&"):
        words = shlex.split(command)
        if words[:2] == ["pip", "install"]:
            # --no-cache-dir keeps the image small; here the machine's pip cache saves the downloads.
            subprocess.run(
                [str(image.bin_dir / "pip"), *(word for word in words[1:] if word != "--no-cache-dir")],
                cwd=image.path(image.workdir),
                env=clean_environment(image.bin_dir),
                check=True,
            )
        elif words[:2] == ["rm", "-rf"]:
            for path in words[2:]:
                shutil.rmtree(image.path(path), ignore_errors=True)
        elif words[:1] == ["useradd"]:
            _useradd(image, words[1:])
        else:
            raise ReplayError(f"RUN {command.strip()}: the replay does not know this command")


def _useradd(image: Image, words: list[str]) -> None:
    """`useradd` needs root, which the replay has not: the user is recorded, its home made."""
    name = words[-1]
    home = words[words.index("--home-dir") + 1] if "--home-dir" in words else f"/home/{name}"
    image.users[name] = home
    if "--create-home" in words or "-m" in words:
        image.path(home).mkdir(parents=True, exist_ok=True)


def _user(image: Image, arguments: str, _context: Path) -> None:
    image.user = arguments


def _exec_form(arguments: str, keyword: str) -> list[str]:
    if not arguments.startswith("["):
        # The shell form runs `/bin/sh -c`: SIGTERM (docker stop) would reach the shell, not the bridge.
        raise ReplayError(f"{keyword} must be in exec form (a JSON list)")
    words = json.loads(arguments)
    assert isinstance(words, list) and all(isinstance(word, str) for word in words)
    return words


def _entrypoint(image: Image, arguments: str, _context: Path) -> None:
    image.entrypoint = _exec_form(arguments, "ENTRYPOINT")


def _cmd(image: Image, arguments: str, _context: Path) -> None:
    image.cmd = _exec_form(arguments, "CMD")


_STEPS = {
    "FROM": _from,
    "WORKDIR": _workdir,
    "COPY": _copy,
    "RUN": _run,
    "USER": _user,
    "ENTRYPOINT": _entrypoint,
    "CMD": _cmd,
}
