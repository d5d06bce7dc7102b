"""The locks the image installs from (requirements.lock, requirements-build.lock), against pyproject.toml:
every runtime dependency and every build-system requirement is pinned, at a version its range admits,
with hashes (the Dockerfile installs with --require-hashes); the runtime lock holds no test or tools
extra; and it is closed under the requirements of its pins, as far as the installed metadata can tell
(a pin at the version installed here: each of its requirements, markers evaluated, is pinned too, at an
admitted version); and every pin names, as pip-compile writes it, the project or another pin that needs it.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pins(lock: str) -> dict[str, tuple[Version, int]]:
    """name -> (pinned version, number of hashes), from a pip-compile lock."""
    out: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in (ROOT / lock).read_text().splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match[1])
            out[name] = (Version(match[2]), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, hashes = out[name]
            out[name] = (version, hashes + 1)
    return out


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return project


def _runtime() -> list[Requirement]:
    project = _project()["project"]
    assert isinstance(project, dict)
    return [Requirement(r) for r in project["dependencies"]]


def _build() -> list[Requirement]:
    build = _project()["build-system"]
    assert isinstance(build, dict)
    return [Requirement(r) for r in build["requires"]]


@pytest.mark.parametrize(("lock", "requirements"), [("requirements.lock", _runtime()),
                                                   ("requirements-build.lock", _build())])
def test_every_requirement_of_pyproject_is_pinned_in_its_range(lock: str, requirements: list[Requirement]) -> None:
    pinned = pins(lock)
    for req in requirements:
        name = canonicalize_name(req.name)
        assert name in pinned, f"{lock} lacks {req}: regenerate it (docs/HARDENING.md, 'Scanners')"
        assert req.specifier.contains(pinned[name][0], prereleases=True), f"{lock} pins {name} {pinned[name][0]}"


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-build.lock"])
def test_every_pin_carries_hashes(lock: str) -> None:
    pinned = pins(lock)
    assert pinned and all(hashes >= 1 for _, hashes in pinned.values()), lock
    assert "--index-url" not in (ROOT / lock).read_text()  # no machine's index or find-links baked in


def test_the_runtime_lock_holds_no_test_or_tool_extra() -> None:
    project = _project()["project"]
    assert isinstance(project, dict)
    extras = {canonicalize_name(Requirement(r).name) for reqs in project["optional-dependencies"].values()
              for r in reqs}
    assert {"pytest", "hypothesis"} <= extras
    assert not (extras - {canonicalize_name(r.name) for r in _runtime()}) & set(pins("requirements.lock"))


def _requires(name: str, version: Version) -> list[Requirement] | None:
    """The requirements of ``name``, from the metadata installed here, if that is the pinned version."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if Version(dist.version) != version:
        return None
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def test_the_runtime_lock_is_closed_under_the_requirements_of_its_pins() -> None:
    pinned = pins("requirements.lock")
    needed = {canonicalize_name(r.name) for r in _runtime() if r.marker is None or r.marker.evaluate()}
    judged = 0
    queue = list(needed)
    while queue:
        name = queue.pop()
        requires = _requires(name, pinned[name][0])
        if requires is None:
            continue  # another version is installed here: its metadata says nothing about the pin
        judged += 1
        for req in requires:
            dep = canonicalize_name(req.name)
            assert dep in pinned, f"{name} {pinned[name][0]} requires {req}, which requirements.lock lacks"
            assert req.specifier.contains(pinned[dep][0], prereleases=True), f"{name} requires {req}"
            if dep not in needed:
                needed.add(dep)
                queue.append(dep)
    if judged == 0:
        pytest.skip("no pinned version is installed here; regenerate requirements.lock to judge it again")


def _needed_by(block: str) -> list[str]:
    """Who pip-compile says needs a pin: ``# via X`` or ``# via`` then one ``#   X`` line each."""
    out = []
    for line in block.splitlines()[1:]:
        comment = line.strip()
        if not comment.startswith("#"):
            continue
        words = comment.lstrip("#").split()
        if words and words[0] == "via":
            words = words[1:]
        if words:
            out.append(words[0])
    return out


def test_every_pin_is_there_because_pyproject_or_another_pin_needs_it() -> None:
    text = (ROOT / "requirements.lock").read_text()
    pinned = pins("requirements.lock")
    blocks = [b for b in re.split(r"\n(?=[A-Za-z0-9])", text) if PIN.match(b)]
    assert len(blocks) == len(pinned)
    for block in blocks:
        match = PIN.match(block)
        assert match is not None
        name = match[1]
        parents = _needed_by(block)
        assert parents, f"{name}: pip-compile names who needs every pin ('# via ...')"
        for parent in parents:
            assert parent == "imex-webhook" or canonicalize_name(parent) in pinned, f"{name} via {parent}"
