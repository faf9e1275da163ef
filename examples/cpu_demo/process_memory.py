"""Peak resident memory of every process of one training launch, sampled from outside.

A launch (``python -m gtpo_verl.main``) starts a local Ray cluster whose processes all descend
from the driver: GCS, raylet, the TaskRunner, verl's ``WorkerDict`` (FSDP actor), the vLLM server
and engine core, agent-loop and reward workers, TransferQueue. Ray sets each worker's process
title (``ray::WorkerDict.…``), so the peak is keyed by that title's first word (``ray::WorkerDict``),
or by the executable's name for processes without one. Peaks are RSS in MiB (shared pages, such as
vLLM's KV cache and the weights it maps, count in every process that maps them); ``_tree_total_pss``
is the largest proportional set size of the whole tree at one sample, where a shared page counts
once, divided among the processes that share it.
"""

from __future__ import annotations

import os
import threading

import psutil

SAMPLE_EVERY_S = 2.0


def process_key(proc: psutil.Process) -> str:
    """A stable name for one process of the run: Ray's title or the program plus its module."""
    cmdline = proc.cmdline()
    if not cmdline:
        return proc.name()
    head = cmdline[0].split()[0] if cmdline[0] else proc.name()
    if head.startswith("ray::"):
        return head.split(".")[0]
    if "-m" in cmdline[:3]:  # python -m module
        return f"{os.path.basename(head)} -m {cmdline[cmdline.index('-m') + 1]}"
    script = next((a for a in cmdline[1:3] if a.endswith(".py")), None)
    return f"{os.path.basename(head)} {os.path.basename(script)}" if script else os.path.basename(head)


class PeakMemory:
    """Samples the RSS of ``pid`` and all its descendants every ``SAMPLE_EVERY_S`` seconds until stopped;
    ``also`` adds more roots (a shared Ray head, whose raylet starts a joining launch's workers)."""

    def __init__(self, pid: int, every_s: float = SAMPLE_EVERY_S, also: tuple[int, ...] = ()):
        self.pids, self.every_s = (pid, *also), every_s
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "PeakMemory":
        self._thread.start()
        return self

    def _sample(self) -> None:
        procs = {}
        for pid in self.pids:
            try:
                root = psutil.Process(pid)
                procs.update((p.pid, p) for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                continue
        if not procs:
            return
        total = 0.0
        for proc in procs.values():
            try:
                memory = proc.memory_full_info()
                key = process_key(proc)
            except psutil.Error:  # exited between listing and reading
                continue
            total += memory.pss / 2**20
            self.peaks[key] = max(memory.rss / 2**20, self.peaks.get(key, 0.0))
        self.peaks["_tree_total_pss"] = max(total, self.peaks.get("_tree_total_pss", 0.0))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every_s)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {k: round(v, 1) for k, v in self.peaks.items()}
