"""Machine facts and the Markdown / short reports."""

from __future__ import annotations

import os
import platform
from typing import Any, Optional

import numpy as np
import torch

from benchmarks.bench_estimators.candidates import GRPO, MODE_TARGETS, TARGET_SIZE, TARGETS
from benchmarks.bench_estimators.sizes import size_label


# ----------------------------------------------------------------------------- report


def machine_info(device: torch.device) -> dict[str, Any]:
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    versions = {}
    for mod in ("verl", "omegaconf", "gtpo_verl"):
        try:
            from importlib.metadata import version

            versions[mod] = version(mod)
        except Exception:
            versions[mod] = "?"
    info = {
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "numpy": np.__version__,
        **{f"{k}_version": v for k, v in versions.items()},
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return info


def loadavg() -> Optional[list[float]]:
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def _cell(text: str, width: int) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(str(text).replace("|", "/").split())[:width]


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return f"{value:{spec}}{suffix}"


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    label = size_label(TARGET_SIZE)
    entry = next((s for s in results["sizes"] if s["size"] == label), None)
    if entry is None:
        return []
    by_name = {c["name"]: c for c in entry["candidates"]}
    out = []
    for name, metric, bound, text in TARGETS:
        value = by_name.get(name, {}).get(metric)
        out.append({"target": text, "candidate": name, "metric": metric, "bound": bound, "value": value,
                    "met": None if value is None else bool(value <= bound)})
    return out


def evaluate_mode_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every estimator of ours in every timing mode: quiet <= 1.0x, busy neighbour <= 2.0x verl grpo."""
    out = []
    for entry in results["sizes"]:
        for mode in entry.get("modes") or []:
            bound = MODE_TARGETS["busy" if mode["neighbour"] else "quiet"]
            for c in entry["candidates"]:
                if c.get("kind") != "estimator" or not c.get("ours"):
                    continue
                value = ((c.get("modes") or {}).get(mode["label"]) or {}).get("ratio")
                out.append({"size": entry["size"], "mode": mode["label"], "candidate": c["name"], "bound": bound,
                            "value": value, "met": None if value is None else bool(value <= bound)})
    return out


def to_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = ["## Machine", ""]
    desc = (f"- CPU: {m['cpu_model']}, {m['usable_cpus']} usable of {m['logical_cpus']} logical CPUs, "
            f"{m['memory_gib']} GiB RAM")
    lines.append(desc)
    lines.append(f"- torch {m['torch']} ({m['torch_threads']} intra-op threads), numpy {m['numpy']}, "
                 f"verl {m['verl_version']}, gtpo_verl {m['gtpo_verl_version']}, Python {m['python']}")
    if "gpu" in m:
        lines.append(f"- GPU: {m['gpu']} ({m['gpu_memory_gib']} GiB), CUDA {m['cuda']}")
    code = results.get("code")
    if code:
        where = (f"commit {code['commit'][:12]} (`--code-ref {code['code_ref']}`)" if code.get("commit")
                 else f"working tree at {code.get('git_head', '?')[:12]}"
                 + (" **with uncommitted changes**" if code.get("uncommitted_changes") else ""))
        lines.append(f"- gtpo_verl code: {where}, source sha256 {code['source_sha256']}"
                     + (" — **changed during the run: numbers mix versions**" if code.get("changed_during_run") else ""))
    s = results["settings"]
    lines.append(f"- device `{s['device']}`, {s['repeats']} repeats (round-robin, median), seed {s['seed']}, "
                 f"load average before/after: {s.get('loadavg_before')} / {s.get('loadavg_after')}")
    lines.append("")
    for entry in results["sizes"]:
        lines += [f"## {entry['size']} (B={entry['B']}, T={entry['T']}; one (B,T) float32 = "
                  f"{entry['bt_float32_bytes'] / 2**20:.1f} MiB)", ""]
        cal = entry.get("calibration")
        if cal:
            lines += [f"One float32 (B,T) elementwise pass on this machine: {cal['in_place_pass_ms']:.3f} ms into an "
                      f"existing tensor, {cal['fresh_output_pass_ms']:.3f} ms into a freshly allocated one; a row sum "
                      f"{cal['row_sum_pass_ms']:.3f} ms.", ""]
        lines.append("| candidate | median ms | ratio | vs | peak extra mem (× B·T·f32) | big ops | "
                     "traversals (floor) | traffic (floor) | fresh (B,T) allocs (units) |")
        lines.append("|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for c in entry["candidates"]:
            if "error" in c:
                lines.append(f"| {c['name']} | error: {_cell(c['error'], 120)} | | | | | | | |")
                continue
            ref = "verl grpo" if c["reference"] == GRPO else "verl vanilla"
            mem = c.get("memory_multiple")
            mem_txt = _fmt(mem, ".2f", "×") if mem is not None else ("error" if c.get("memory_error") else "—")
            lines.append(
                f"| {c['name']} | {_fmt(c['median_ms'], '.2f')} | {_fmt(c.get('ratio'), '.2f', '×')} | {ref} | "
                f"{mem_txt} | {_fmt(c.get('big_ops'), 'g')} | "
                f"{_fmt(c.get('traversals'), 'g')} ({c['floor_traversals']}) | "
                f"{_fmt(c.get('traffic_units'), '.1f')} ({c['floor_traffic_units']:.1f}) | "
                f"{_fmt(c.get('big_allocs'), 'd')} ({_fmt(c.get('alloc_units'), '.1f')}) |"
            )
        lines.append("")
        lines += modes_table(entry)
    if results.get("targets"):
        lines += [f"## Targets at {size_label(TARGET_SIZE)}", "", "| target | value | met |", "|---|---:|---|"]
        for t in results["targets"]:
            met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append(f"| {t['target']} | {_fmt(t['value'], '.2f')} | {met} |")
        lines.append("")
    mode_targets = evaluate_mode_targets(results)
    if any(len(e.get("modes") or []) > 1 for e in results["sizes"]):
        lines += ["## Targets per timing mode (quiet <= 1.0x, busy neighbour <= 2.0x verl grpo in the same mode)", "",
                  "| size | mode | candidate | ratio | met |", "|---|---|---|---:|---|"]
        for t in mode_targets:
            met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append(f"| {t['size']} | {t['mode']} | {t['candidate']} | {_fmt(t['value'], '.2f', '×')} | {met} |")
        lines.append("")
    largest = results["sizes"][-1] if results["sizes"] else None
    if largest and any(c.get("top_ops") for c in largest["candidates"]):
        lines += [f"## Where time goes at {largest['size']} (one call)", "",
                  "| candidate | top aten ops by self time (share) | top package functions by cumulative time (share) |",
                  "|---|---|---|"]
        for c in largest["candidates"]:
            ops = ", ".join(f"{o['op']} {o['share']:.0%} ({o['calls']}×)" for o in c.get("top_ops", [])[:5])
            inner = [f for f in c.get("top_functions", []) if f["share"] < 0.97][:4]  # skip the entry point
            fns = ", ".join(f"`{f['function'].split('/')[-1]}` {f['share']:.0%}" for f in inner)
            lines.append(f"| {c['name']} | {ops} | {fns} |")
        lines.append("")
    check = results.get("check")
    if check:
        lines += [f"## Equality check: {check['device']} vs cpu at {check['size']}", "",
                  "| candidate | allclose | max abs diff | error |", "|---|---|---:|---|"]
        for r in check["rows"]:
            lines.append(f"| {r['candidate']} | {'yes' if r['allclose'] else '**no**'} | "
                         f"{_fmt(r.get('max_abs_diff'), '.2e')} | {_cell(r.get('error', ''), 160)} |")
        lines.append(f"\nInputs unchanged by every call: {'yes' if check['inputs_unchanged'] else '**no**'}. "
                     f"Check {'passed' if check['passed'] else '**FAILED**'}.\n")
    return "\n".join(lines)


def modes_table(entry: dict[str, Any]) -> list[str]:
    """Markdown: one column per timing mode (threads, neighbour), ``ms (ratio)`` per candidate."""
    modes = entry.get("modes") or []
    if len(modes) < 2:
        return []
    lines = [f"Timing modes at {entry['size']}: median ms (ratio to verl grpo, or to verl vanilla for the "
             "losses, in the same mode)", "",
             "| candidate | " + " | ".join(m["label"] for m in modes) + " |",
             "|---|" + "---:|" * len(modes)]
    for c in entry["candidates"]:
        cells = []
        for m in modes:
            t = (c.get("modes") or {}).get(m["label"])
            cells.append("—" if t is None else f"{t['median_ms']:.1f} ({_fmt(t['ratio'], '.2f', '×')})")
        lines.append(f"| {c['name']} | " + " | ".join(cells) + " |")
    loads = "; ".join(f"{m['label']}: {m['loadavg_before']} → {m['loadavg_after']}" for m in modes)
    lines += ["", f"Load average before → after each mode: {loads}", ""]
    return lines


def short_table(results: dict[str, Any]) -> str:
    """A compact summary: one line per (size, candidate), then the equality check verdicts."""
    m = results["machine"]
    lines = [f"{m.get('gpu', m['cpu_model'])} | torch {m['torch']} | device {results['settings']['device']}", "",
             f"{'size':<12} {'candidate':<30} {'median ms':>10} {'ratio':>7} {'mem x':>6}  note"]
    for entry in results["sizes"]:
        for c in entry["candidates"]:
            note = c.get("error", "")[:70]
            lines.append(f"{entry['size']:<12} {c['name']:<30} {_fmt(c.get('median_ms'), '10.3f'):>10} "
                         f"{_fmt(c.get('ratio'), '6.2f'):>7} {_fmt(c.get('memory_multiple'), '5.2f'):>6}  {note}")
    for entry in results["sizes"]:
        lines += [""] + modes_table(entry)
    check = results.get("check")
    if check:
        lines += ["", f"equality {check['device']} vs cpu at {check['size']}:"]
        for r in check["rows"]:
            verdict = "ok" if r["allclose"] else "MISMATCH"
            lines.append(f"  {r['candidate']:<30} {verdict:<8} max|diff| {_fmt(r.get('max_abs_diff'), '.2e')}"
                         f"  {r.get('error', '')[:90]}")
        lines.append(f"  inputs unchanged: {check['inputs_unchanged']}; check {'PASSED' if check['passed'] else 'FAILED'}")
    return "\n".join(lines)
