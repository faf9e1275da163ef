"""The tools are console scripts of the installed package, and modules: both forms start and explain themselves."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = {  # console script → module, and a word its --help must contain
    "gtpo-preflight": ("gtpo_verl.tools.preflight", "preflight: true"),  # Hydra prints the composed config
    "gtpo-audit": ("gtpo_verl.tools.audit", "gtpo.audit.dir"),
    "gtpo-dashboard": ("gtpo_verl.tools.dashboard", "--entity"),
    "gtpo-report": ("gtpo_verl.tools.report", "NAME=PATH"),
    "gtpo-mechanism": ("gtpo_verl.tools.mechanism", "--ratios"),
}


def _run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd="/")


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_script_and_module_both_answer_help(script):
    module, word = SCRIPTS[script]
    installed = Path(sys.executable).parent / script  # pip install -e . wrote it next to this interpreter
    assert installed.exists(), f"{installed} is missing: reinstall the package (pip install -e .)"
    for command in ([str(installed), "--help"], [sys.executable, "-m", module, "--help"]):
        proc = _run(command)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert word in proc.stdout, (command, proc.stdout[-2000:])


def test_the_audit_names_itself_by_its_console_script():
    proc = _run([sys.executable, "-m", "gtpo_verl.tools.audit", "--help"])
    assert proc.stdout.startswith("usage: gtpo-audit ")
