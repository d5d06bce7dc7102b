"""The Dockerfile's contract (no Docker engine runs in CI): multi-stage, the package installed from its
wheel, a non-root user, `imex-webhook` as entrypoint, and a .dockerignore that keeps secrets and caches out."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[2]


def _instructions() -> list[tuple[str, str]]:
    out = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest))
    return out


def test_the_image_is_built_in_two_stages_from_a_slim_base() -> None:
    froms = [rest for word, rest in _instructions() if word == "FROM"]
    assert len(froms) == 2 and all("slim" in f for f in froms)


def test_the_package_is_installed_from_its_wheel() -> None:
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    assert "build --wheel" in runs and "pip install --no-cache-dir /dist/*.whl" in runs


def test_the_runtime_user_is_not_root_and_the_entrypoint_is_the_cli() -> None:
    instructions = _instructions()
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert ("ENTRYPOINT", '["imex-webhook"]') in instructions


def test_the_build_context_leaves_out_the_virtualenv_and_git() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
