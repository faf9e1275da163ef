"""``PROBE=1`` on any training recipe: the same command with ``gtpo.probe=true`` added, nothing else
changed; without it the command carries no probe (the pinned commands stay as they are)."""

import shlex

import pytest

from support.launchers import run_script
from support.recipes import TRAINING_RECIPES


def _argv(stdout: str) -> list[str]:
    return shlex.split(" ".join(line.rstrip("\\") for line in stdout.splitlines()[1:]))


@pytest.mark.parametrize("script", TRAINING_RECIPES)
def test_probe_adds_one_override(script, stubs, tmp_path):
    plain, _ = run_script(stubs, tmp_path, script, DRY_RUN=1)
    probed, calls = run_script(stubs, tmp_path, script, DRY_RUN=1, PROBE=1)
    assert plain.returncode == probed.returncode == 0 and calls == []
    plain_argv, probed_argv = _argv(plain.stdout), _argv(probed.stdout)
    assert "gtpo.probe=true" not in plain_argv
    assert sorted(probed_argv) == sorted(plain_argv + ["gtpo.probe=true"])
