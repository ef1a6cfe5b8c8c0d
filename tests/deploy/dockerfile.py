"""Reading the Dockerfile into steps a test can run without a Docker engine.

Only what our Dockerfile uses is understood (FROM, ENV, WORKDIR, COPY, RUN, USER, EXPOSE,
HEALTHCHECK, CMD); anything else is an error, so a new instruction cannot slip past the test.
The image's absolute paths are mapped under a temporary root.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "CMD"}
# The image's own directories; each is mapped under the test's root.
_IMAGE_PATH = re.compile(r"(?<![\w.$/-])/(?:src|opt|var)(?=/|\b)")


@dataclass
class Image:
    base: str = ""
    steps: list[tuple[str, str]] = field(default_factory=list)  # (instruction, argument)
    user: str = "root"
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    exposed: list[int] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        name, _, arg = whole.partition(" ")
        if name.upper() not in KNOWN:
            raise ValueError(f"the Dockerfile test does not know {name!r}: teach it first")
        out.append((name.upper(), arg.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)


def read(path: Path) -> Image:
    image = Image()
    for name, arg in instructions(path.read_text("utf-8")):
        # ENV, WORKDIR, COPY and RUN are kept in order in ``steps``, for the test to apply.
        if name == "FROM":
            image.base = arg
        elif name == "USER":
            image.user = arg
        elif name == "EXPOSE":
            image.exposed.append(int(arg.split("/")[0]))
        elif name == "CMD":
            image.cmd = json.loads(arg)
        elif name == "HEALTHCHECK":
            _, _, command = arg.partition("CMD ")
            assert command, "HEALTHCHECK without CMD"
            image.healthcheck = json.loads(command)
        image.steps.append((name, arg))
    return image


def mapped(text: str, root: Path) -> str:
    """``text`` with the image's absolute paths moved under ``root``."""
    return _IMAGE_PATH.sub(lambda m: f"{root}{m.group(0)}", text)
