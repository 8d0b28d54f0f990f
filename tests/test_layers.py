"""The layer rules (``[tool.importlinter]`` in pyproject.toml) hold, and the check bites.

``scripts/test`` runs ``lint-imports`` itself; this runs it too, so that a plain
``pytest`` catches a violation, and shows on a copy of the tree that each kind of
violation is reported: a type-only import or cycle counts as much as a runtime one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("t3orch", "adapters", "supervisor", "fixtures")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # The root packages are found on the working directory first (lint-imports puts
    # it at the front of sys.path), so a copy of the tree is checked as the copy.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_the_layer_rules() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _python_only(directory: str, names: list[str]) -> set[str]:
    return {
        n
        for n in names
        if n == "__pycache__" or (not n.endswith(".py") and not Path(directory, n).is_dir())
    }


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The packages' modules and pyproject.toml, copied: a tree to break."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=_python_only)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


TYPE_ONLY = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    {}\n"


@pytest.mark.parametrize(
    ("module", "added", "contract"),
    [
        # The core importing the supervisor, inside a function (a lazy import).
        (
            "t3orch/ids.py",
            "def _late() -> None:\n    import supervisor.manager\n",
            "layers: supervisor > adapters > t3orch",
        ),
        # An adapter importing the supervisor for a type only.
        (
            "adapters/errors.py",
            TYPE_ONLY.format("from supervisor.manager import SessionManager"),
            "layers: supervisor > adapters > t3orch",
        ),
        # An upper layer importing the composition root (which imports it back).
        (
            "supervisor/providers.py",
            "def _late() -> None:\n    import t3orch.daemon\n",
            "the composition root: imported by the CLI commands that run it only",
        ),
        # A core module outside the composition root importing the test fixtures.
        (
            "t3orch/cli/threadcmds.py",
            "def _late() -> None:\n    import fixtures.fakes.codex_home\n",
            "fixtures: test support, imported by no package",
        ),
        (
            "adapters/errors.py",
            "def _late() -> None:\n    import tests.conftest\n",
            "tests and bench: imported by no package",
        ),
        # A type-only cycle: t3orch.core imports t3orch.ids at runtime.
        (
            "t3orch/ids.py",
            TYPE_ONLY.format("from t3orch.core import Core"),
            "no import cycles",
        ),
        # A type-only cycle inside a subpackage (the one checkpointing.py had).
        (
            "supervisor/checkpointing.py",
            TYPE_ONLY.format("from supervisor.manager import SessionManager"),
            "no import cycles",
        ),
    ],
)
def test_a_violation_breaks_its_contract(
    tree: Path, module: str, added: str, contract: str
) -> None:
    path = tree / module
    path.write_text(path.read_text() + "\n\n" + added)
    done = lint_imports(tree)
    assert done.returncode != 0, done.stdout
    assert f"{contract} BROKEN" in done.stdout, done.stdout
    assert "1 broken" in done.stdout, done.stdout
