"""A Dockerfile replayed without a Docker engine (none runs where this project is tested).

`replay` reads the Dockerfile and carries out its steps into a fresh folder standing for the
image's `/`, with a fresh virtualenv standing for the image's Python: COPY from the build context,
WORKDIR, `RUN pip install` and `RUN pip wheel` with that virtualenv's pip, `RUN rm -rf`, `RUN
useradd` (recorded: the user and its home folder), USER, ENTRYPOINT and CMD. A multi-stage build
works as Docker's does: each FROM starts a stage with a folder and a virtualenv of its own,
`FROM ... AS name` names it, `COPY --from=name` copies out of that stage's folder, and the last
stage is the image. Any other instruction or command is refused
with its line, so that a Dockerfile step the replay cannot check fails the test instead of being
skipped. Paths the image would see (`/etc/hookbridge/bridge.conf`) map to the folder (`Image.path`).
"""

from __future__ import annotations

import glob
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
    where: Path
    """The folder the replay works in: each stage's `/` and virtualenv are made there."""
    stages: dict[str, Path] = field(default_factory=dict)
    """Earlier stages by name (`FROM ... AS name`): the folder standing for each one's `/`."""
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
    image = Image(root=where / "no-stage", bin_dir=where / "no-stage", where=where)
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
    """A new stage: a fresh `/` and Python; the previous stage is kept under its name, if it has one."""
    match = re.fullmatch(r"(\S+)(?:\s+as\s+(\S+))?", arguments, re.IGNORECASE)
    if match is None:
        raise ReplayError(f"FROM {arguments}: an image, and optionally `AS name`")
    base, name = match[1], match[2] or ""
    python = f"python:{sys.version_info.major}.{sys.version_info.minor}"
    if not re.fullmatch(rf"{re.escape(python)}(-slim)?(-\w+)?", base):
        raise ReplayError(f"FROM {arguments}: the replay's virtualenv stands for {python} only")
    number = len(list(image.where.glob("stage-*")))
    stage = image.where / f"stage-{number}"
    stage.mkdir(parents=True)
    image.root, image.bin_dir = stage / "root", fresh_virtualenv(stage / "python")
    image.root.mkdir()
    image.base, image.workdir, image.user = base, "/", "root"
    image.users, image.entrypoint, image.cmd = {}, [], []
    if name:
        image.stages[name] = image.root


def _workdir(image: Image, arguments: str, _context: Path) -> None:
    image.workdir = str(PurePosixPath(image.workdir) / arguments)
    image.path(image.workdir).mkdir(parents=True, exist_ok=True)


def _copy(image: Image, arguments: str, context: Path) -> None:
    words = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
    origin = context
    if words and words[0].startswith("--from="):
        stage = words.pop(0).removeprefix("--from=")
        if stage not in image.stages:
            raise ReplayError(f"COPY --from={stage}: no earlier stage of that name")
        origin = image.stages[stage]
    if any(word.startswith("--") for word in words):
        raise ReplayError(f"COPY {arguments}: options are not replayed")
    *sources, destination = words
    into_folder = destination.endswith("/") or len(sources) > 1
    target = image.path(destination)
    for source in sources:
        found = origin / source.lstrip("/")
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
        if words[:2] in (["pip", "install"], ["pip", "wheel"]):
            # --no-cache-dir keeps the image small; here the machine's pip cache saves the downloads.
            subprocess.run(
                [str(image.bin_dir / "pip"), *_image_paths(image, [w for w in words[1:] if w != "--no-cache-dir"])],
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


def _image_paths(image: Image, words: list[str]) -> list[str]:
    """Absolute paths of the image mapped into its folder, and a glob (`/wheels/x-*.whl`) expanded
    as the shell would: to the matches, sorted, or left as it is when nothing matches."""
    out: list[str] = []
    for word in words:
        if not word.startswith("/"):
            out.append(word)
            continue
        mapped = str(image.path(word))
        out.extend(sorted(glob.glob(mapped)) or [mapped])
    return out


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
