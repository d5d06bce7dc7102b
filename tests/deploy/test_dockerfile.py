"""The Dockerfile's contract (no Docker engine runs in CI): multi-stage; every dependency from a hash-pinned
lock, wheels only, the backend from its own lock and our wheel built against it and installed without
dependencies; a non-root user, `imex-webhook` as entrypoint, and a .dockerignore that keeps secrets and
caches out (and lets the locks in)."""

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


def _runs() -> list[str]:
    """RUN instructions with their continuation lines joined, split into the commands they chain."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [line.strip()[4:] for line in text.splitlines() if line.strip().startswith("RUN ")]
    return [" ".join(cmd.split()) for run in runs for cmd in run.split("&&")]


def test_every_pip_install_takes_hashed_pins_from_a_lock_or_installs_our_wheel_alone() -> None:
    installs = [cmd for cmd in _runs() if " install " in f" {cmd} " and "pip" in cmd]
    assert len(installs) == 3
    for cmd in installs:
        from_lock = "--require-hashes" in cmd and "--only-binary=:all:" in cmd and " -r requirements" in cmd
        wheel_alone = "--no-deps /dist/*.whl" in cmd
        assert from_lock or wheel_alone, cmd
    assert any("-r requirements.lock" in c for c in installs)
    assert any("-r requirements-build.lock" in c for c in installs)


def test_the_wheel_is_built_against_the_locked_backend() -> None:
    (build,) = [cmd for cmd in _runs() if " wheel " in cmd]
    assert "--no-build-isolation" in build and "--no-deps" in build
    copies = [rest for word, rest in _instructions() if word == "COPY"]
    assert "requirements-build.lock requirements.lock ./" in copies


def test_the_runtime_user_is_not_root_and_the_entrypoint_is_the_cli() -> None:
    instructions = _instructions()
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert ("ENTRYPOINT", '["imex-webhook"]') in instructions


def test_the_build_context_leaves_out_the_virtualenv_and_git() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
    assert not {"requirements.lock", "requirements-build.lock", "*.lock"} & set(ignored)
