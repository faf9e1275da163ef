"""End states and verdicts, by a rule fixed before the study runs.

Endpoints of one run (``endpoints``):

- ``pass@1``, ``pass@16``: mean over the last ``ENDPOINT_EVALS`` validations (the last 75 steps
  at the default spacing of 25), on the fixed validation set;
- ``entropy``, ``entropy_decision``, ``entropy_forced``, ``length``: means over the last
  ``ENDPOINT_STEPS`` training steps of the per-step values, each measured on the same population
  for every method (the responses to the step's first training batch, ``gtpo_verl/lab/train.py``);
- ``drawdown``: the largest fall of validation pass@1 below its running maximum (steadiness). Every
  validation of a run draws the same uniforms, so a policy that has not changed scores the same:
  evaluation noise cannot make a drawdown (``train.validate``);
- ``collapse``: 1 if the end state is ``collapsed-flat`` (Paper A's policy collapse), else 0;
- ``trap``: 1 if the end state is ``trap``; an outcome of its own, never counted as Paper A's collapse.

End state (``end_state``), first match wins, with H₀ the first step's entropy, P₀ the step-0 pass@1:

1. ``collapsed-flat`` — Paper A's policy collapse: entropy ≥ ``FLAT_ENTROPY_RATIO``·H₀ and pass@1 < P₀
   (a flattening distribution, rising entropy, falling reward);
2. ``solved`` — pass@1 ≥ ``SOLVED_PASS1``;
3. ``trap`` — pass@16 − pass@1 < ``TRAP_GAP`` (sampling 16 times adds almost nothing: a deterministic
   unsolved rule, i.e. entropy collapse onto a partial answer — the opposite of Paper A's collapse);
4. ``partial`` — pass@1 ≥ P₀ + ``PARTIAL_GAIN``;
5. ``flat`` — none of the above.

Families, each Holm-corrected on its own (per task rows pooled over the study's tasks):

- ``primary`` (``PRIMARY_CLAIMS``): the papers' claims, method vs baseline on the same seeds, one
  direction each: ``supported`` if Holm p < ``ALPHA`` and the mean paired difference has the claimed
  sign, ``contradicted`` if Holm p < ``ALPHA`` with the opposite sign, else ``inconclusive``;
- ``sensitivity`` (``SENSITIVITY``): the knobs the papers leave open (δ × ⟨H⟩_ini, GTPO's α₁);
- ``context`` (``CONTEXT_COMPARISONS``): the entropy baselines, Clip-Cov and KL-Cov vs DAPO;
- ``null`` (``NULL_COMPARISONS``): GRPO against its twin on another sampler stream — identical
  methods, so every row should read ``no difference detected`` (at Holm's family-wise rate α).

The last three are two-sided, reported as ``higher`` / ``lower`` / ``no difference detected``.
Test: exact Wilcoxon signed-rank on continuous endpoints, exact sign test on 0/1 indicators (its p
alongside on every row). Each row carries the paired mean difference, its seeded bootstrap 95 %
interval, the smallest p its exact test could reach with its pairs, and the seeds a z
approximation says 80 % power needs at
Holm's strictest threshold α/m of its family (never fewer than the exact test needs to get there;
None where the observed effect is 0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from gtpo_verl.lab.stats import (
    bootstrap_mean_ci, holm, nonzero_differences, seeds_for_power, sign_test, smallest_exact_p, wilcoxon_signed_rank,
)

ENDPOINT_EVALS = 4
ENDPOINT_STEPS = 50
FLAT_ENTROPY_RATIO = 1.25
SOLVED_PASS1 = 0.9
TRAP_GAP = 0.05
PARTIAL_GAIN = 0.1
ALPHA = 0.05
BOOTSTRAP_SEED = 12345
END_STATES = ("collapsed-flat", "solved", "trap", "partial", "flat")
INDICATORS = ("collapse", "trap")


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
    Claim("A-no-collapse", "A", "GTPO-trajectory (official δ) ends in Paper A's collapse less often than GRPO", "GTPO_TRAJ", "GRPO", "collapse", -1),
    Claim("A-steadier", "A", "GTPO-trajectory (official δ) is steadier than GRPO (smaller pass@1 drawdown)", "GTPO_TRAJ", "GRPO", "drawdown", -1),
    Claim("A-no-collapse-scaled", "A", "GTPO-trajectory (δ = ⟨H⟩_ini) ends in Paper A's collapse less often than GRPO", "GTPO_TRAJ_D10", "GRPO", "collapse", -1),
    Claim("A-steadier-scaled", "A", "GTPO-trajectory (δ = ⟨H⟩_ini) is steadier than GRPO", "GTPO_TRAJ_D10", "GRPO", "drawdown", -1),
)
SENSITIVITY = (
    *((m, "GRPO", e) for m in ("GTPO_TRAJ_D08", "GTPO_TRAJ_D10", "GTPO_TRAJ_D12") for e in ("pass@1", "pass@16", "entropy")),
    *(("DAPO_TOKEN_A05", "DAPO", e) for e in ("entropy", "length", "pass@16")),
    *(("DAPO_TOKEN_A05", "DAPO_TOKEN", e) for e in ("entropy", "pass@16")),
)
CONTEXT_METHODS = ("DAPO_HIGH_ENTROPY", "DAPO_ENTROPY_ADV", "CLIP_COV", "KL_COV")
CONTEXT_ENDPOINTS = ("pass@1", "pass@16", "entropy")
CONTEXT_COMPARISONS = tuple((m, "DAPO", e) for m in CONTEXT_METHODS for e in CONTEXT_ENDPOINTS)
NULL_COMPARISONS = tuple(("GRPO_TWIN", "GRPO", e) for e in ("pass@1", "pass@16", "entropy", "length", "drawdown", "collapse"))
TWO_SIDED_FAMILIES = {"sensitivity": SENSITIVITY, "context": CONTEXT_COMPARISONS, "null": NULL_COMPARISONS}


def _nanmean(values) -> float:
    values = [v for v in values if v == v]
    return float(np.mean(values)) if values else float("nan")


def drawdown(values) -> float:
    """The largest fall of a series below its running maximum (0 for a series that never falls)."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.max(np.maximum.accumulate(values) - values))


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
    curves = run["curves"]
    out: dict[str, Any] = {
        "pass@1": float(np.mean([v["pass@1"] for v in last])),
        "pass@16": float(np.mean([v["pass@16"] for v in last])),
        **{name: _nanmean(curves.get(name, [])[-ENDPOINT_STEPS:]) for name in ("entropy", "entropy_decision", "entropy_forced", "length")},
        "drawdown": drawdown(pass1),
        "kept_groups": _nanmean(curves.get("kept_groups", [])),
        "stalled_steps": float(np.nansum(curves.get("stalled", []))),
    }
    if with_state:
        out["end_state"] = end_state(run)
        out["collapse"] = float(out["end_state"] == "collapsed-flat")
        out["trap"] = float(out["end_state"] == "trap")
    return out


def _paired(table: dict, task: str, method: str, baseline: str, endpoint: str) -> tuple[list, np.ndarray]:
    """The seeds both runs measured ``endpoint`` on, and the paired differences method − baseline."""
    a, b = table.get((task, method), {}), table.get((task, baseline), {})
    seeds = sorted((s for s in set(a) & set(b) if endpoint in a[s] and endpoint in b[s]), key=_seed_order)
    return seeds, np.array([a[s][endpoint] - b[s][endpoint] for s in seeds], dtype=np.float64)


def _seed_order(seed) -> tuple:
    return (0, int(seed), "") if str(seed).isdigit() else (1, 0, str(seed))


def _test(endpoint: str, differences: np.ndarray) -> tuple[str, float]:
    if endpoint in INDICATORS:
        return "exact sign test", sign_test(differences)
    return "exact Wilcoxon signed-rank", wilcoxon_signed_rank(differences)


def endpoint_table(runs: list[dict]) -> dict:
    """``{(task, method): {seed: endpoints}}``."""
    table: dict = {}
    for run in runs:
        table.setdefault((run["task"], run["method"]), {})[run["seed"]] = endpoints(run)
    return table


def paired_row(table: dict, task: str, method: str, baseline: str, endpoint: str) -> dict[str, Any] | None:
    """The paired comparison ``method − baseline`` on ``endpoint`` (``endpoint_table``'s form), tested by the
    fixed rule; None when no seed has both. ``holm_family`` completes a family of such rows."""
    seeds, d = _paired(table, task, method, baseline, endpoint)
    if not seeds:
        return None
    test, p = _test(endpoint, d)
    nonzero = len(nonzero_differences(d))
    return {"task": task, "method": method, "baseline": baseline, "endpoint": endpoint, "seeds": len(seeds), "test": test, "p": p,
            "sign_test_p": sign_test(d), "smallest_p": smallest_exact_p(nonzero), "mean_difference": float(d.mean()),
            "ci95": list(bootstrap_mean_ci(d, seed=BOOTSTRAP_SEED)), "paired_seeds": list(seeds), "per_seed": [float(x) for x in d]}


def holm_family(family: list[dict]) -> None:
    """Holm over one family of ``paired_row`` rows (in place): ``p_holm``, the rounded per-seed differences
    and the seeds 80 % power would need at α / (family size)."""
    for row, adjusted in zip(family, holm([row["p"] for row in family])):
        row["p_holm"] = adjusted
    for row in family:
        differences = np.asarray(row.pop("per_seed"), dtype=np.float64)
        row["per_seed_difference"] = differences.round(6).tolist()
        row["seeds_needed_80pct_power"] = seeds_for_power(differences, alpha=ALPHA, family_size=len(family))


def claim_verdict(p_holm: float, mean_difference: float, direction: int) -> str:
    """A one-direction claim's verdict: ``supported`` / ``contradicted`` when Holm p < ``ALPHA`` (by the sign of
    the mean paired difference against the claimed ``direction``), else ``inconclusive``."""
    if not p_holm < ALPHA:
        return "inconclusive"
    return "supported" if np.sign(mean_difference) == direction else "contradicted"


def difference_verdict(p_holm: float, mean_difference: float) -> str:
    """A two-sided comparison's verdict: ``higher`` / ``lower`` when Holm p < ``ALPHA``, else ``no difference detected``."""
    if not p_holm < ALPHA:
        return "no difference detected"
    return "higher" if mean_difference > 0 else "lower"


def score_claims(table: dict, tasks: list[str], claims) -> list[dict[str, Any]]:
    """Every claim (``Claim``) on every task both of its methods ran: the paired row, the seeds whose nonzero
    difference has the claimed sign (and the opposite one), Holm over all rows, and ``claim_verdict``.

    ``table`` is ``{(task, method): {seed: {endpoint: value}}}`` (``endpoint_table``'s form); a seed
    pairs when both runs have the endpoint.
    """
    rows = []
    for task in tasks:
        for claim in claims:
            row = paired_row(table, task, claim.method, claim.baseline, claim.endpoint)
            if row is not None:
                signed = nonzero_differences(row["per_seed"]) * claim.direction
                rows.append({"id": claim.id, "paper": claim.paper, "claim": claim.text, "direction": claim.direction,
                             **row, "seeds_as_claimed": int((signed > 0).sum()), "seeds_against": int((signed < 0).sum())})
    holm_family(rows)
    for row in rows:
        row["verdict"] = claim_verdict(row["p_holm"], row["mean_difference"], row["direction"])
    return rows


def verdicts(runs: list[dict]) -> dict[str, Any]:
    """Every family's rows scored by the fixed rule; plus end-state counts and the per-seed endpoints."""
    table = endpoint_table(runs)
    tasks = sorted({r["task"] for r in runs})
    primary = score_claims(table, tasks, PRIMARY_CLAIMS)
    families: dict[str, list[dict]] = {name: [] for name in TWO_SIDED_FAMILIES}
    for task in tasks:
        for name, comparisons in TWO_SIDED_FAMILIES.items():
            for method, baseline, endpoint in comparisons:
                row = paired_row(table, task, method, baseline, endpoint)
                if row is not None:
                    families[name].append(row)
    for family in families.values():
        holm_family(family)
        for row in family:
            row["verdict"] = difference_verdict(row["p_holm"], row["mean_difference"])
    states = {f"{task}/{method}": dict(Counter(e["end_state"] for e in seeds.values())) for (task, method), seeds in sorted(table.items())}
    return {"rule": __doc__, "alpha": ALPHA, "primary": primary, **families, "end_states": states,
            "endpoints": {f"{t}/{m}": {str(s): e for s, e in seeds.items()} for (t, m), seeds in sorted(table.items())}}
