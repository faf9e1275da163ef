"""End states and verdicts, by a rule fixed before the study runs.

Endpoints of one run (``endpoints``):

- ``pass@1``, ``pass@16``: mean over the last ``ENDPOINT_EVALS`` validations (the last 75 steps
  at the default spacing of 25), on the fixed validation set;
- ``entropy``, ``length``: mean token-mean old-policy entropy and mean response length over the
  last ``ENDPOINT_STEPS`` training steps (the same token-mean for every method);
- ``drawdown``: the largest fall of validation pass@1 below its running maximum (steadiness);
- ``collapse``: 1 if the end state is ``collapsed-flat`` or ``trap``, else 0.

End state (``end_state``), first match wins, with H₀ the first step's entropy, P₀ the step-0 pass@1:

1. ``collapsed-flat`` — Paper A's policy collapse: entropy ≥ ``FLAT_ENTROPY_RATIO``·H₀ and pass@1 < P₀
   (a flattening distribution, rising entropy, falling reward);
2. ``solved`` — pass@1 ≥ ``SOLVED_PASS1``;
3. ``trap`` — pass@16 − pass@1 < ``TRAP_GAP`` (sampling 16 times adds almost nothing: a deterministic
   unsolved rule, i.e. entropy collapse onto a partial answer);
4. ``partial`` — pass@1 ≥ P₀ + ``PARTIAL_GAIN``;
5. ``flat`` — none of the above.

Claims (``PRIMARY_CLAIMS``, per task): the method's endpoint against its baseline's on the same
seeds. Test: exact Wilcoxon signed-rank on continuous endpoints, exact sign test on the 0/1
``collapse`` indicator; Holm-corrected over every primary claim of the study (both tasks). A
claim is ``supported`` if its Holm p < ``ALPHA`` and the mean paired difference has the claimed
sign, ``contradicted`` if Holm p < ``ALPHA`` with the opposite sign, else ``inconclusive``. Each
verdict carries the paired mean difference and its seeded bootstrap 95 % interval. The context
comparisons (``CONTEXT_COMPARISONS``: the entropy baselines, Clip-Cov, KL-Cov vs DAPO) are a
second Holm family, two-sided, reported as ``higher`` / ``lower`` / ``no difference detected``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from gtpo_verl.lab.stats import bootstrap_mean_ci, holm, seeds_for_power, sign_test, wilcoxon_signed_rank

ENDPOINT_EVALS = 4
ENDPOINT_STEPS = 50
FLAT_ENTROPY_RATIO = 1.25
SOLVED_PASS1 = 0.9
TRAP_GAP = 0.05
PARTIAL_GAIN = 0.1
ALPHA = 0.05
BOOTSTRAP_SEED = 12345
END_STATES = ("collapsed-flat", "solved", "trap", "partial", "flat")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    text: str
    method: str
    baseline: str
    endpoint: str
    direction: int
    """+1: the claim says the method's endpoint is higher; −1: lower."""


PRIMARY_CLAIMS = (
    Claim("B-entropy-token", "B", "entropy rises under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "entropy", +1),
    Claim("B-entropy-seq", "B", "entropy rises under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "entropy", +1),
    Claim("B-length-token", "B", "response length rises under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "length", +1),
    Claim("B-length-seq", "B", "response length rises under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "length", +1),
    Claim("B-pass16-token", "B", "pass@16 improves under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "pass@16", +1),
    Claim("B-pass16-seq", "B", "pass@16 improves under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "pass@16", +1),
    Claim("A-no-collapse", "A", "GTPO-trajectory (official δ) collapses less than GRPO", "GTPO_TRAJ", "GRPO", "collapse", -1),
    Claim("A-no-collapse-scaled", "A", "GTPO-trajectory (δ scaled to ⟨H⟩_ini) collapses less than GRPO", "GTPO_TRAJ_SCALED", "GRPO", "collapse", -1),
    Claim("A-steadier", "A", "GTPO-trajectory (official δ) is steadier than GRPO (smaller pass@1 drawdown)", "GTPO_TRAJ", "GRPO", "drawdown", -1),
    Claim("A-steadier-scaled", "A", "GTPO-trajectory (δ scaled) is steadier than GRPO", "GTPO_TRAJ_SCALED", "GRPO", "drawdown", -1),
)
CONTEXT_METHODS = ("DAPO_HIGH_ENTROPY", "DAPO_ENTROPY_ADV", "CLIP_COV", "KL_COV")
CONTEXT_ENDPOINTS = ("pass@1", "pass@16", "entropy")
CONTEXT_COMPARISONS = tuple((m, "DAPO", e) for m in CONTEXT_METHODS for e in CONTEXT_ENDPOINTS)


def _nanmean(values) -> float:
    values = [v for v in values if v == v]
    return float(np.mean(values)) if values else float("nan")


def end_state(run: dict) -> str:
    """The run's end state by the rule in the module docstring."""
    e = endpoints(run, with_state=False)
    p0 = run["validation"][0]["pass@1"]
    h0 = next((h for h in run["curves"]["entropy"] if h == h), float("nan"))
    if e["entropy"] >= FLAT_ENTROPY_RATIO * h0 and e["pass@1"] < p0:
        return "collapsed-flat"
    if e["pass@1"] >= SOLVED_PASS1:
        return "solved"
    if e["pass@16"] - e["pass@1"] < TRAP_GAP:
        return "trap"
    if e["pass@1"] >= p0 + PARTIAL_GAIN:
        return "partial"
    return "flat"


def endpoints(run: dict, with_state: bool = True) -> dict[str, Any]:
    """The per-seed endpoints the verdicts compare (module docstring)."""
    last = run["validation"][-ENDPOINT_EVALS:]
    pass1 = [v["pass@1"] for v in run["validation"]]
    running = np.maximum.accumulate(pass1)
    out: dict[str, Any] = {
        "pass@1": float(np.mean([v["pass@1"] for v in last])),
        "pass@16": float(np.mean([v["pass@16"] for v in last])),
        "entropy": _nanmean(run["curves"]["entropy"][-ENDPOINT_STEPS:]),
        "length": _nanmean(run["curves"]["length"][-ENDPOINT_STEPS:]),
        "drawdown": float(np.max(running - np.asarray(pass1))),
    }
    if with_state:
        out["end_state"] = end_state(run)
        out["collapse"] = float(out["end_state"] in ("collapsed-flat", "trap"))
    return out


def _paired(table: dict, task: str, method: str, baseline: str, endpoint: str) -> tuple[list[int], np.ndarray]:
    a, b = table.get((task, method), {}), table.get((task, baseline), {})
    seeds = sorted(set(a) & set(b))
    return seeds, np.array([a[s][endpoint] - b[s][endpoint] for s in seeds], dtype=np.float64)


def _test(endpoint: str, differences: np.ndarray) -> tuple[str, float]:
    if endpoint == "collapse":
        return "exact sign test", sign_test(differences)
    return "exact Wilcoxon signed-rank", wilcoxon_signed_rank(differences)


def endpoint_table(runs: list[dict]) -> dict:
    """``{(task, method): {seed: endpoints}}``."""
    table: dict = {}
    for run in runs:
        table.setdefault((run["task"], run["method"]), {})[run["seed"]] = endpoints(run)
    return table


def verdicts(runs: list[dict]) -> dict[str, Any]:
    """Every primary claim and context comparison, scored by the fixed rule; plus end-state counts."""
    table = endpoint_table(runs)
    tasks = sorted({r["task"] for r in runs})
    primary, context = [], []
    for task in tasks:
        for claim in PRIMARY_CLAIMS:
            seeds, d = _paired(table, task, claim.method, claim.baseline, claim.endpoint)
            if not seeds:
                continue
            test, p = _test(claim.endpoint, d)
            primary.append({"id": claim.id, "task": task, "paper": claim.paper, "claim": claim.text, "method": claim.method,
                            "baseline": claim.baseline, "endpoint": claim.endpoint, "direction": claim.direction,
                            "seeds": len(seeds), "test": test, "p": p, "mean_difference": float(d.mean()),
                            "ci95": list(bootstrap_mean_ci(d, seed=BOOTSTRAP_SEED)),
                            "seeds_needed_80pct_power": seeds_for_power(d)})
        for method, baseline, endpoint in CONTEXT_COMPARISONS:
            seeds, d = _paired(table, task, method, baseline, endpoint)
            if not seeds:
                continue
            test, p = _test(endpoint, d)
            context.append({"task": task, "method": method, "baseline": baseline, "endpoint": endpoint, "seeds": len(seeds),
                            "test": test, "p": p, "mean_difference": float(d.mean()),
                            "ci95": list(bootstrap_mean_ci(d, seed=BOOTSTRAP_SEED))})
    for family in (primary, context):
        for row, adjusted in zip(family, holm([row["p"] for row in family])):
            row["p_holm"] = adjusted
    for row in primary:
        significant = row["p_holm"] < ALPHA
        agrees = np.sign(row["mean_difference"]) == row["direction"]
        row["verdict"] = ("supported" if agrees else "contradicted") if significant else "inconclusive"
    for row in context:
        row["verdict"] = ("higher" if row["mean_difference"] > 0 else "lower") if row["p_holm"] < ALPHA else "no difference detected"
    states = {f"{task}/{method}": dict(Counter(e["end_state"] for e in seeds.values())) for (task, method), seeds in sorted(table.items())}
    return {"rule": __doc__, "alpha": ALPHA, "primary": primary, "context": context, "end_states": states,
            "endpoints": {f"{t}/{m}": {str(s): e for s, e in seeds.items()} for (t, m), seeds in sorted(table.items())}}
