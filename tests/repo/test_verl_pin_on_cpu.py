"""The one verl pin, gtpo_verl/config/REQUIRED_VERL.txt, and everything that reads it.

The file is in verl-recipe's REQUIRED_VERL.txt form (KEY=VALUE lines, ``#`` comments; its
install_verl.sh reads UPSTREAM, MODE, TAG, PIP_INSTALL, GIT_SETUP); setup.py and gtpo-preflight read
it through one parser, gtpo_verl/tools/required_verl.py.
"""

import ast
import os
import re
import subprocess
import sys

import pytest
from support.paths import REPO_ROOT as ROOT

from gtpo_verl.tools.required_verl import read_fields, required_verl

PIN = ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt"


def test_verl_pin():
    """The one pin (gtpo_verl/config/REQUIRED_VERL.txt), what setup.py made of it in the installed package's
    requirements, what the preflight checks, and the verl these tests composed against agree."""
    import importlib.metadata

    import verl

    from gtpo_verl.tools import preflight

    pin = re.search(r"^TAG=v(\S+)$", (ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text(), re.M).group(1)
    assert pin == verl.__version__ == "0.9.1"
    requires = importlib.metadata.requires("gtpo_verl") or []
    assert "verl[verl-core]==0.9.1" in requires and 'verl[vllm]==0.9.1; extra == "gpu"' in requires
    assert preflight.VERL_VERSION == verl.__version__


def test_the_pin_file_is_in_verl_recipes_form():
    """Every line is a comment, blank, or KEY=VALUE (once per key), with verl-recipe's keys for a release pin."""
    keys = []
    for line in PIN.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*=\S.*", line), f"not a KEY=VALUE line: {line!r}"
            keys.append(line.split("=", 1)[0])
    assert len(keys) == len(set(keys)), keys
    fields = read_fields(PIN.read_text())
    assert (fields["UPSTREAM"], fields["MODE"], fields["TAG"]) == ("https://github.com/verl-project/verl.git", "pinned_tag", "v0.9.1")
    assert set(keys) == {"UPSTREAM", "MODE", "TAG", "PIP_INSTALL", "GIT_SETUP",
                         "GPU_TORCH", "GPU_VLLM", "GPU_TRANSFORMERS", "GPU_FLASH_ATTN"}


def test_the_pip_install_line_installs_what_setup_py_requires(tmp_path):
    """install_verl.sh runs PIP_INSTALL with ``bash -c``: a stub pip records the argv it would get."""
    import importlib.metadata

    stub = tmp_path / "pip"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "${STUB_ARGV}"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "STUB_ARGV": str(tmp_path / "argv")}
    line = read_fields(PIN.read_text())["PIP_INSTALL"]
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True, timeout=30)
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["install", "verl[verl-core]==0.9.1"]
    assert argv[1] in importlib.metadata.requires("gtpo_verl")


def test_setup_py_reads_the_pin_without_importing_the_package():
    tree = ast.parse((ROOT / "setup.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [name for name in imported if name.split(".")[0] == "gtpo_verl"]
    check = ("import runpy, sys; sys.argv = ['setup.py', '--version']; g = runpy.run_path('setup.py'); "
             "print(g['VERL'], 'gtpo_verl' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["0.9.1", "False"]  # the pin, through the parser, and no package import


def test_the_parser_reads_keys_as_install_verl_sh_does():
    text = "\n".join([
        "# TAG=v0.0.1 in a comment is no field",
        "   # nor in an indented one",
        "prose without an equals sign is skipped",
        "  UPSTREAM=https://github.com/verl-project/verl.git  ",  # blanks before the key and after the value go
        "MODE=pinned_tag",
        "TAG=v1.2.3",
        "TAG=v9.9.9",  # the first TAG= line wins
        "PIP_INSTALL=pip install 'verl[verl-core]==1.2.3'",
        "GPU_TORCH=2.0.0", "GPU_VLLM=0.1.0", "GPU_TRANSFORMERS=4.0.0", "GPU_FLASH_ATTN=2.0.1",
        "NOTES=a=b keeps everything after the first =",
    ])
    fields = read_fields(text)
    assert fields["UPSTREAM"] == "https://github.com/verl-project/verl.git" and fields["TAG"] == "v1.2.3"
    assert fields["NOTES"] == "a=b keeps everything after the first ="
    assert required_verl(text) == ("1.2.3", {"torch": "2.0.0", "vllm": "0.1.0", "transformers": "4.0.0", "flash-attn": "2.0.1"})


@pytest.mark.parametrize(("change", "named"), [
    (("PIP_INSTALL=pip install 'verl[verl-core]==0.9.1'", "PIP_INSTALL=pip install 'verl[verl-core]==0.9.0'"), "PIP_INSTALL="),
    (("git checkout v0.9.1", "git checkout v0.9.0"), "GIT_SETUP="),
    (("TAG=v0.9.1", "TAG=0.9.1"), "TAG=v<verl release>"),
    (("MODE=pinned_tag", "MODE=rolling"), "MODE=pinned_tag"),
    (("GPU_VLLM=0.24.0\n", ""), "no GPU_VLLM= line"),
])
def test_a_pin_that_disagrees_with_itself_is_refused(change, named):
    text = PIN.read_text()
    assert change[0] in text
    with pytest.raises(ValueError, match=re.escape(named)):
        required_verl(text.replace(change[0], change[1], 1))
