"""Command line: ``python -m benchmarks.bench_estimators`` (see the package docstring)."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from benchmarks.bench_estimators.candidates import CANDIDATES, CANDIDATES_BY_NAME, GRPO, LOSS_AGG_MODE, VANILLA, _core_algos, make_runner
from benchmarks.bench_estimators.measures import CHECK_SIZE, count_passes, equality_check, floor_traffic_units, memory_child, memory_cuda, memory_in_subprocess, profile_functions, profile_ops
from benchmarks.bench_estimators.report import evaluate_targets, loadavg, machine_info, short_table, to_markdown
from benchmarks.bench_estimators.sizes import SIZES, make_batch, parse_size, size_label
from benchmarks.bench_estimators.source import REPO_ROOT, code_fingerprint, export_code_ref, use_code_dir
from benchmarks.bench_estimators.timing import MIN_SAMPLE_SECONDS, busy_neighbour, calibrate_passes, parse_threads, time_round_robin, timing_modes


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", choices=sorted(SIZES), default="default",
                   help="small=8x16x256 (development); default=64x16x1024,128x16x4096; all=default+32x16x20480")
    p.add_argument("--size", type=parse_size, action="append", default=None,
                   help="explicit PROMPTSxGROUPxLENGTH (repeatable), replaces --sizes")
    p.add_argument("--repeats", type=int, default=7, help="round-robin repeats; the median is reported (default 7)")
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results/)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--memory", dest="memory", action="store_true", default=None,
                     help="measure peak extra memory (default: on for --sizes default|all, off for small)")
    mem.add_argument("--no-memory", dest="memory", action="store_false")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip the profiler pass")
    p.add_argument("--check", action="store_true", help=f"compare --device outputs with CPU at {size_label(CHECK_SIZE)}")
    p.add_argument("--candidates", default=None, help="comma-separated candidate names (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=parse_threads, default=None,
                   help="torch intra-op threads, or a comma-separated sweep timed in turn (e.g. 1,0); "
                        "0 = torch's default; default 1 on CPU, torch's default on CUDA")
    p.add_argument("--contention", action="store_true",
                   help="also time every thread setting with a CPU-bound neighbour process running")
    p.add_argument("--no-passes", dest="passes", action="store_false", help="skip the pass-counting call")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--short", action="store_true",
                   help="print a compact table (ms, ratio, memory, check) instead of the full Markdown report")
    p.add_argument("--code-ref", default=None,
                   help="benchmark gtpo_verl as committed at this git revision (e.g. HEAD), exported to a temp "
                        "folder, instead of the working tree (which other work may be editing)")
    p.add_argument("--code-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-size", type=parse_size, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.threads is None:
        args.threads = [1] if torch.device(args.device).type == "cpu" else [0]
    modes = timing_modes(args.threads, args.contention)
    torch.set_num_threads(modes[0]["threads"])
    args.threads = modes[0]["threads"]  # what the memory children run with
    if args.memory_child:
        use_code_dir(args.code_dir)
        print(json.dumps(memory_child(args.memory_child, args.child_size, args.seed)))
        return 0

    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    sizes = args.size or SIZES[args.sizes]
    memory = args.memory if args.memory is not None else (args.size is not None or args.sizes != "small")
    names = [n.strip() for n in args.candidates.split(",")] if args.candidates else [c.name for c in CANDIDATES]
    unknown = [n for n in names if n not in CANDIDATES_BY_NAME]
    if unknown:
        print(f"unknown candidate(s) {unknown}; known: {list(CANDIDATES_BY_NAME)}", file=sys.stderr)
        return 2
    for needed in (GRPO, VANILLA):  # the references of the ratios are always measured
        if needed not in names and any(CANDIDATES_BY_NAME[n].reference == needed for n in names):
            names.insert(0, needed)
    if GRPO not in names:
        names.insert(0, GRPO)
    candidates = [c for c in CANDIDATES if c.name in names]
    out_dir = Path(args.out) if args.out else REPO_ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)

    code_commit = None
    if args.code_ref:
        args.code_dir, code_commit = export_code_ref(args.code_ref)
        log(f"benchmarking gtpo_verl at {code_commit[:12]} (exported to {args.code_dir})")
    use_code_dir(args.code_dir)
    _core_algos()  # import verl (and the plugin) before any timing
    code_start = code_fingerprint()
    if code_commit:
        code_start["code_ref"] = args.code_ref
        code_start["commit"] = code_commit
    results: dict[str, Any] = {
        "machine": machine_info(device),
        "settings": {"device": str(device), "repeats": args.repeats, "seed": args.seed,
                     "threads": torch.get_num_threads(), "modes": [m["label"] for m in modes],
                     "sizes": [size_label(s) for s in sizes], "loss_agg_mode": LOSS_AGG_MODE,
                     "min_sample_seconds": MIN_SAMPLE_SECONDS, "loadavg_before": loadavg()},
        "sizes": [],
    }
    for size in sizes:
        prompts, group, length = size
        log(f"size {size_label(size)}: building batch")
        batch = make_batch(prompts, group, length, seed=args.seed, device=device)
        entry: dict[str, Any] = {"size": size_label(size), "B": prompts * group, "T": length,
                                 "bt_float32_bytes": batch.numel * 4, "candidates": []}
        runners, rows = {}, {}
        for cand in candidates:
            row = {"name": cand.name, "kind": cand.kind, "ours": cand.ours, "reference": cand.reference,
                   "floor_traversals": cand.floor_traversals,
                   "floor_traffic_units": round(floor_traffic_units(cand, batch), 2)}
            try:
                runners[cand.name] = make_runner(cand, batch)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows[cand.name] = row
        # a candidate that fails its first call is reported, not timed
        for name in list(runners):
            try:
                runners[name]()
            except Exception as exc:
                rows[name]["error"] = f"{type(exc).__name__}: {exc}"
                del runners[name]
                log(f"  {name}: error {rows[name]['error'][:200]}")
        entry["calibration"] = calibrate_passes(tuple(batch.response_mask.shape), device)
        entry["modes"] = []
        for index, mode in enumerate(modes):
            torch.set_num_threads(mode["threads"])
            log(f"  timing {len(runners)} candidates, {args.repeats} repeats, {mode['label']}")
            with busy_neighbour(mode["neighbour"]):
                load_before = loadavg()
                timings = time_round_robin(runners, args.repeats, device, log)
                entry["modes"].append({**mode, "loadavg_before": load_before, "loadavg_after": loadavg()})
            for name, t in timings.items():
                ref_t = timings.get(CANDIDATES_BY_NAME[name].reference)
                ratio = round(t["median_ms"] / ref_t["median_ms"], 3) if ref_t else None
                rows[name].setdefault("modes", {})[mode["label"]] = {
                    "median_ms": round(t["median_ms"], 3), "ratio": ratio, "samples_ms": t["samples_ms"]}
                if index == 0:
                    rows[name].update(t)
        torch.set_num_threads(modes[0]["threads"])
        for name, row in rows.items():
            ref = rows.get(CANDIDATES_BY_NAME[name].reference, {})
            grpo = rows.get(GRPO, {})
            if "median_ms" in row and "median_ms" in ref:
                row["ratio"] = round(row["median_ms"] / ref["median_ms"], 3)
            if "median_ms" in row and "median_ms" in grpo:
                row["ratio_vs_grpo"] = round(row["median_ms"] / grpo["median_ms"], 3)
            vec = rows.get("grpo_vectorized (verl)", {})
            if "median_ms" in row and "median_ms" in vec and row["kind"] == "estimator":
                row["ratio_vs_grpo_vectorized"] = round(row["median_ms"] / vec["median_ms"], 3)
        log("  counting passes" * args.passes + (" and profiling" if args.profile else ""))
        for name, run in runners.items():
            if args.passes:
                rows[name].update(count_passes(run, batch.numel))
            if args.profile:
                rows[name]["top_ops"] = profile_ops(run, device)
                rows[name]["top_functions"] = profile_functions(run)
            if memory and device.type == "cuda":
                rows[name].update(memory_cuda(run, batch.numel, device))
        entry["candidates"] = [rows[c.name] for c in candidates]
        results["sizes"].append(entry)
        del runners, batch
        gc.collect()
    results["settings"]["loadavg_after"] = loadavg()

    if memory and device.type == "cpu":
        for entry, size in zip(results["sizes"], sizes):
            for row in entry["candidates"]:
                if "error" in row:
                    continue
                log(f"memory {entry['size']} {row['name']}")
                mem = memory_in_subprocess(row["name"], size, args.seed, args.threads, args.code_dir)
                if "error" in mem:
                    row["memory_error"] = mem["error"]
                else:
                    row.update({k: mem[k] for k in ("peak_extra_bytes", "memory_multiple", "reliable")})
                    row["memory_source_sha256"] = mem.get("source_sha256")

    code_end = code_fingerprint()
    child_sources = {row.get("memory_source_sha256") for e in results["sizes"] for row in e["candidates"]} - {None}
    code_start["changed_during_run"] = code_end["source_sha256"] != code_start["source_sha256"] or bool(
        child_sources - {code_start["source_sha256"]})
    if code_end.get("uncommitted_changes"):
        code_start["uncommitted_changes"] = True
    results["code"] = code_start
    if code_start["changed_during_run"]:
        log("WARNING: the gtpo_verl source changed during the run (see 'code' in the JSON); rerun, or use --code-ref")

    exit_code = 0
    if args.check:
        log(f"equality check on {device} at {size_label(CHECK_SIZE)}")
        results["check"] = equality_check(device, args.seed, log)
        exit_code = 0 if results["check"]["passed"] else 1
    results["targets"] = evaluate_targets(results)

    stem = f"bench_{device.type}_{args.sizes if not args.size else 'custom'}"
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=2))
    markdown = to_markdown(results)
    (out_dir / f"{stem}.md").write_text(markdown + "\n")
    print(short_table(results) if args.short else markdown)
    log(f"wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}")
    if args.code_ref and args.code_dir:
        import shutil

        shutil.rmtree(args.code_dir, ignore_errors=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
