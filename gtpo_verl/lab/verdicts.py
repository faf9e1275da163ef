"""End states and verdicts, by a rule fixed before the study runs.

Endpoints of one run (``endpoints``), with H₀ the first step's entropy and P₀ the step-0 pass@1:

- ``pass@1``, ``pass@4``, ``pass@8``, ``pass@16``: mean over the last ``ENDPOINT_EVALS`` validations
  (the last 75 steps at the default spacing of 25), on the fixed validation set (unbiased pass@k from the
  same 16 samples per prompt; a pass@k a study did not record is absent, and its pairs are excluded).
  pass@4 and pass@8 stay below saturation where pass@16 does not;
- ``entropy``, ``entropy_decision``, ``entropy_forced``, ``length``: means over the last
  ``ENDPOINT_STEPS`` training steps of the per-step values, each measured on the same population
  for every method (the responses to the step's first training batch, ``gtpo_verl/lab/train.py``);
- ``entropy_peak_ratio``: Paper A's collapse as a continuous endpoint: the largest mean of H_t over
  ``PEAK_WINDOW`` consecutive steps, over the mean of the first ``PEAK_WINDOW`` (a flattening
  distribution drives it up; a run whose entropy only falls has 1). Windows, not single steps: one
  step's entropy is measured on one batch, and the maximum of hundreds of noisy batches would rise
  with the run's length and its batch noise, not with a flattening policy;
- ``drawdown_after_learning``: the largest fall of validation pass@1 below its running maximum, counted
  only from the first validation where pass@1 ≥ P₀ + ``PARTIAL_GAIN`` (``learned_at_step``). A run that
  never gets there has no value (None): a policy that does not learn is not "steady", it is excluded.
  Every validation of a run draws the same uniforms, so a policy that has not changed scores the same:
  evaluation noise cannot make a drawdown (``train.validate``);
- ``drawdown``: the same fall over the whole run (descriptive: a run that never learns has 0);
- ``collapse``: 1 if the end state is ``collapsed-flat`` (Paper A's policy collapse), else 0;
- ``trap``: 1 if the end state is ``trap``; an outcome of its own, never counted as Paper A's collapse.

End state (``end_state``), first match wins:

1. ``collapsed-flat`` — Paper A's policy collapse: entropy ≥ ``FLAT_ENTROPY_RATIO``·H₀ and pass@1 < P₀
   (a flattening distribution, rising entropy, falling reward);
2. ``solved`` — pass@1 ≥ ``SOLVED_PASS1``;
3. ``trap`` — pass@16 − pass@1 < ``TRAP_GAP`` (sampling 16 times adds almost nothing: a deterministic
   unsolved rule, i.e. entropy collapse onto a partial answer — the opposite of Paper A's collapse);
4. ``partial`` — pass@1 ≥ P₀ + ``PARTIAL_GAIN``;
5. ``flat`` — none of the above.

Pairs. A comparison pairs the seeds on which both runs have the endpoint. A seed without a run or without
a value (an endpoint of None or NaN: ``drawdown_after_learning`` of a run that never learned, a pass@k not
recorded) is excluded, never dropped in silence: the row lists each excluded seed with its reason
(``excluded``, ``excluded_pairs``); a row whose pairs are all excluded reads ``no pairs``.

Families, each Holm-corrected on its own (per task rows pooled over the study's tasks):

- ``primary`` (``PRIMARY_CLAIMS``, ids ``lab-…``): the papers' claims, method vs baseline on the same seeds, one
  direction each, Holm-corrected within each paper (Paper B's rows one family, Paper A's another).
  Paper B: entropy, length, pass@8 and pass@1 higher under GTPO-token and GRPO-S than DAPO. Paper A, on its
  paper preset (``GTPO_TRAJ_PAPER``, the primary arm): a lower ``entropy_peak_ratio`` (less collapse)
  and a smaller ``drawdown_after_learning`` (steadier) than GRPO; δ at the official 0.7 nats and scaled
  to ⟨H⟩_ini are sensitivity rows.
  The null-twin rule (``TWINS``): each claim's baseline has a twin, the same method on another sampler
  stream (GRPO_TWIN for GRPO, DAPO_TWIN for DAPO), and the twin's effect (its mean paired difference
  against the same baseline, on the same endpoint, over the claim's paired seeds where the twin has a value)
  is computed beside the claim's. Each claim is tested one-sided (the paper states its direction), in the
  claimed direction and, separately, in the opposite one, each Holm-corrected within the paper's rows. A
  claim is scored only where its effect exceeds the twin's in size, |method − baseline| > |twin − baseline|:
  then ``supported`` if the claimed direction's Holm p < ``ALPHA`` and the mean paired difference has the
  claimed sign, ``contradicted`` if the opposite direction's Holm p < ``ALPHA`` with the opposite sign, else
  ``inconclusive``. A claim whose effect is not above its twin's reads ``not above the null twin`` (both
  effects on the row), and one whose twin did not run reads ``no null twin``: neither is scored;
- ``sensitivity`` (``SENSITIVITY``): the knobs the papers leave open (δ: official 0.7 nats and × ⟨H⟩_ini;
  GTPO's α₁; the row share S20 against DAPO and the column share S18, with the decision tokens' entropy);
- ``context`` (``CONTEXT_COMPARISONS``): the entropy baselines, Clip-Cov and KL-Cov vs DAPO;
- ``null`` (``NULL_COMPARISONS``): GRPO and DAPO each against its twin on every claim endpoint — identical
  methods, so every row should read ``no difference detected`` (at Holm's family-wise rate α).

The last three are two-sided, reported as ``higher`` / ``lower`` / ``no difference detected``.
Test: exact Wilcoxon signed-rank on continuous endpoints, exact sign test on 0/1 indicators (the two-sided
sign test's p alongside on every row); one-sided for the primary claims, two-sided for the other families. Each row carries the paired mean difference, its seeded bootstrap 95 %
interval, the smallest p its exact test could reach with its pairs, and the seeds a z
approximation says 80 % power needs at
Holm's strictest threshold α/m of its family (never fewer than the exact test needs to get there;
None where the observed effect is 0).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from gtpo_verl.lab.stats import (
    ZERO_TOLERANCE, bootstrap_mean_ci, holm, nonzero_differences, seeds_for_power, sign_test, sign_test_one_sided,
    smallest_exact_p, wilcoxon_signed_rank, wilcoxon_signed_rank_one_sided,
)

ENDPOINT_EVALS = 4
"""The lab's validation endpoint window: the last 4 validations (pass@k; the last 75 steps at the default spacing)."""
ENDPOINT_STEPS = 50
"""The lab's training endpoint window: the last 50 training steps (entropy, entropy on decisions and forced tokens,
length). The lab's only end-of-run window over training steps (``gtpo_verl/lab/claim_ids.py`` lists each context's)."""
PEAK_WINDOW = 10
FLAT_ENTROPY_RATIO = 1.25
SOLVED_PASS1 = 0.9
TRAP_GAP = 0.05
PARTIAL_GAIN = 0.1
LEARNED_TOLERANCE = 1e-9
"""pass@1 ≥ P₀ + ``PARTIAL_GAIN`` − this counts as learned: 0.2 + 0.1 is 0.30000000000000004 in floating point."""
ALPHA = 0.05
BOOTSTRAP_SEED = 12345
END_STATES = ("collapsed-flat", "solved", "trap", "partial", "flat")
INDICATORS = ("collapse", "trap")
PASS_K_ENDPOINTS = ("pass@1", "pass@4", "pass@8", "pass@16")
TWINS = {"GRPO": "GRPO_TWIN", "DAPO": "DAPO_TWIN"}
"""Each claim baseline's null twin: the same method on another sampler stream (``methods.py``)."""
NO_VALUE = {"drawdown_after_learning": f"never reached P₀ + {PARTIAL_GAIN} pass@1",
            **{k: "not recorded" for k in PASS_K_ENDPOINTS}}
"""Why a run has no value of an endpoint (an excluded pair's reason); else ``no value``."""


@dataclass(frozen=True)
class Claim:
    id: str
    """Unique across the project (``gtpo_verl/lab/claim_ids.py``)."""
    paper: str
    text: str
    method: str
    baseline: str
    endpoint: str
    direction: int
    """+1: the claim says the method's endpoint is higher; −1: lower."""


PRIMARY_CLAIMS = (
    Claim("lab-B-entropy-token", "B", "entropy rises under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "entropy", +1),
    Claim("lab-B-entropy-seq", "B", "entropy rises under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "entropy", +1),
    Claim("lab-B-length-token", "B", "response length rises under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "length", +1),
    Claim("lab-B-length-seq", "B", "response length rises under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "length", +1),
    Claim("lab-B-pass8-token", "B", "pass@8 (below saturation) improves under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "pass@8", +1),
    Claim("lab-B-pass8-seq", "B", "pass@8 (below saturation) improves under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "pass@8", +1),
    # Paper B's accuracy is best@k far below saturation (AIME); where a task's pass@k saturates (unary_chain's warm
    # start already has pass@8 ≈ 0.98), the per-sample accuracy is the one accuracy endpoint left below it
    Claim("lab-B-pass1-token", "B", "pass@1 improves under GTPO (token) vs DAPO", "DAPO_TOKEN", "DAPO", "pass@1", +1),
    Claim("lab-B-pass1-seq", "B", "pass@1 improves under GRPO-S vs DAPO", "DAPO_SEQ", "DAPO", "pass@1", +1),
    Claim("lab-A-entropy-peak", "A", "GTPO-trajectory (paper preset) collapses less than GRPO (lower peak entropy ratio "
          "max H_t/H_0)", "GTPO_TRAJ_PAPER", "GRPO", "entropy_peak_ratio", -1),
    Claim("lab-A-steady-once-learned", "A", "GTPO-trajectory (paper preset) is steadier than GRPO once learned (smaller pass@1 "
          "drawdown after first reaching P_0 + 0.1)", "GTPO_TRAJ_PAPER", "GRPO", "drawdown_after_learning", -1),
)
"""Each claim's id is unique across the project (``gtpo_verl/lab/claim_ids.py``): ``lab-`` + paper + what it tests."""
SENSITIVITY = (
    # δ as the paper leaves it open (the official 0.7 nats, and × ⟨H⟩_ini) on Paper A's own endpoints and three more
    *((m, "GRPO", e) for m in ("GTPO_TRAJ", "GTPO_TRAJ_D08", "GTPO_TRAJ_D10", "GTPO_TRAJ_D12")
      for e in ("entropy_peak_ratio", "drawdown_after_learning", "pass@1", "pass@16", "entropy")),
    # the row share (S20) against DAPO and against the column share (S18), with the decisions' own entropy
    *(("DAPO_TOKEN_ROW", "DAPO", e) for e in ("entropy", "entropy_decision", "length", "pass@8")),
    *(("DAPO_TOKEN_ROW", "DAPO_TOKEN", e) for e in ("entropy_decision", "pass@8")),
    *((m, "DAPO", "entropy_decision") for m in ("DAPO_TOKEN", "DAPO_SEQ")),
    *(("DAPO_TOKEN_A05", "DAPO", e) for e in ("entropy", "length", "pass@16")),
    *(("DAPO_TOKEN_A05", "DAPO_TOKEN", e) for e in ("entropy", "pass@16")),
)
CONTEXT_METHODS = ("DAPO_HIGH_ENTROPY", "DAPO_ENTROPY_ADV", "CLIP_COV", "KL_COV")
CONTEXT_ENDPOINTS = ("pass@1", "pass@16", "entropy")
CONTEXT_COMPARISONS = tuple((m, "DAPO", e) for m in CONTEXT_METHODS for e in CONTEXT_ENDPOINTS)
NULL_ENDPOINTS = ("pass@1", "pass@8", "pass@16", "entropy", "length", "entropy_peak_ratio", "drawdown_after_learning")
NULL_COMPARISONS = tuple((twin, baseline, e) for baseline, twin in TWINS.items() for e in NULL_ENDPOINTS)
TWO_SIDED_FAMILIES = {"sensitivity": SENSITIVITY, "context": CONTEXT_COMPARISONS, "null": NULL_COMPARISONS}


def _nanmean(values) -> float:
    values = [v for v in values if v == v]
    return float(np.mean(values)) if values else float("nan")


def _has_value(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def drawdown(values) -> float:
    """The largest fall of a series below its running maximum (0 for a series that never falls)."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.max(np.maximum.accumulate(values) - values))


def learned_index(pass1, p0: float) -> Optional[int]:
    """The first validation whose pass@1 ≥ ``p0`` + ``PARTIAL_GAIN`` (``LEARNED_TOLERANCE``); None if none does."""
    return next((i for i, p in enumerate(pass1) if p >= p0 + PARTIAL_GAIN - LEARNED_TOLERANCE), None)


def drawdown_after_learning(pass1, p0: float) -> Optional[float]:
    """The largest fall of pass@1 below its running maximum from ``learned_index`` on; None for a run that never learned.
    (Every earlier value lies below the first learned one, so the running maximum needs no earlier point.)"""
    first = learned_index(pass1, p0)
    return None if first is None else drawdown(pass1[first:])


def entropy_peak_ratio(entropy, window: Optional[int] = None) -> Optional[float]:
    """The largest ``window``-step moving mean of the finite per-step entropies over the first one (module
    docstring); ``window`` defaults to ``PEAK_WINDOW``, capped by the steps there are. None without a positive start."""
    finite = np.array([h for h in entropy if _has_value(h)], dtype=np.float64)
    width = min(window or PEAK_WINDOW, len(finite))
    if width == 0:
        return None
    moving = np.convolve(finite, np.full(width, 1.0 / width), mode="valid")
    if not moving[0] > 0:
        return None
    return float(moving.max() / moving[0])


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
    first = learned_index(pass1, pass1[0])
    out: dict[str, Any] = {
        **{k: float(np.mean([v[k] for v in last])) for k in PASS_K_ENDPOINTS if all(k in v for v in last)},
        **{name: _nanmean(curves.get(name, [])[-ENDPOINT_STEPS:]) for name in ("entropy", "entropy_decision", "entropy_forced", "length")},
        "entropy_peak_ratio": entropy_peak_ratio(curves.get("entropy", [])),
        "drawdown": drawdown(pass1),
        "drawdown_after_learning": drawdown_after_learning(pass1, pass1[0]),
        "learned_at_step": None if first is None else run["validation"][first].get("step", first),
        "kept_groups": _nanmean(curves.get("kept_groups", [])),
        "stalled_steps": float(np.nansum(curves.get("stalled", []))),
    }
    if with_state:
        out["end_state"] = end_state(run)
        out["collapse"] = float(out["end_state"] == "collapsed-flat")
        out["trap"] = float(out["end_state"] == "trap")
    return out


def _missing(by_seed: dict, seed, endpoint: str) -> Optional[str]:
    """Why ``seed`` has no ``endpoint`` value in ``by_seed`` (one method's ``{seed: endpoints}``), or None if it has one."""
    if seed not in by_seed:
        return "no run"
    if not _has_value(by_seed[seed].get(endpoint)):
        return NO_VALUE.get(endpoint, "no value")
    return None


def _paired(table: dict, task: str, method: str, baseline: str, endpoint: str, seeds=None) -> tuple[list, np.ndarray, list[dict]]:
    """``(paired seeds, differences method − baseline, excluded)`` over ``seeds`` (default: every seed either ran):
    a seed pairs when both runs have a value of ``endpoint``; each other seed is excluded with its reason."""
    a, b = table.get((task, method), {}), table.get((task, baseline), {})
    paired, excluded = [], []
    for seed in sorted(set(a) | set(b) if seeds is None else seeds, key=_seed_order):
        why = [f"{name}: {reason}" for name, by_seed in ((method, a), (baseline, b)) if (reason := _missing(by_seed, seed, endpoint))]
        if why:
            excluded.append({"seed": seed, "reason": "; ".join(why)})
        else:
            paired.append(seed)
    return paired, np.array([a[s][endpoint] - b[s][endpoint] for s in paired], dtype=np.float64), excluded


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
    fixed rule; None when either method has no run on ``task``. The seeds excluded from the pairs are on the
    row with their reasons (``excluded``); with none left the row has 0 seeds and p = 1. ``holm_family``
    completes a family of such rows."""
    if not table.get((task, method)) or not table.get((task, baseline)):
        return None
    seeds, d, excluded = _paired(table, task, method, baseline, endpoint)
    test, p = _test(endpoint, d)
    nonzero = len(nonzero_differences(d))
    return {"task": task, "method": method, "baseline": baseline, "endpoint": endpoint, "seeds": len(seeds), "test": test, "p": p,
            "sign_test_p": sign_test(d), "smallest_p": smallest_exact_p(nonzero),
            "mean_difference": float(d.mean()) if len(d) else float("nan"),
            "ci95": list(bootstrap_mean_ci(d, seed=BOOTSTRAP_SEED)), "paired_seeds": list(seeds),
            "excluded_pairs": len(excluded), "excluded": excluded, "per_seed": [float(x) for x in d]}


def holm_family(family: list[dict], sides: int = 2) -> None:
    """Holm over one family of ``paired_row`` rows (in place): ``p_holm``, the rounded per-seed differences
    and the seeds 80 % power would need at α / (family size), for ``sides``-sided tests."""
    for row, adjusted in zip(family, holm([row["p"] for row in family])):
        row["p_holm"] = adjusted
    for row in family:
        differences = np.asarray(row.pop("per_seed"), dtype=np.float64)
        row["per_seed_difference"] = differences.round(6).tolist()
        row["seeds_needed_80pct_power"] = (seeds_for_power(differences, alpha=ALPHA, family_size=len(family), sides=sides)
                                           if differences.size else None)


def one_sided_test(endpoint: str, differences, direction: int) -> tuple[str, float]:
    """The exact one-sided test of a claim's ``direction`` on ``endpoint``: the sign test on 0/1 indicators,
    else the Wilcoxon signed-rank test."""
    if endpoint in INDICATORS:
        return "exact one-sided sign test", sign_test_one_sided(differences, direction)
    return "exact one-sided Wilcoxon signed-rank", wilcoxon_signed_rank_one_sided(differences, direction)


def claim_verdict(p_holm: float, mean_difference: float, direction: int) -> str:
    """A one-direction claim's verdict: ``supported`` / ``contradicted`` when Holm p < ``ALPHA`` (by the sign of
    the mean paired difference against the claimed ``direction``), else ``inconclusive``."""
    if not p_holm < ALPHA:
        return "inconclusive"
    return "supported" if np.sign(mean_difference) == direction else "contradicted"


def above_twin(mean_difference: float, twin_difference: Optional[float]) -> bool:
    """The null-twin rule: the claim's effect exceeds its twin's in size (a tie, within ``ZERO_TOLERANCE``, does not)."""
    if twin_difference is None or not _has_value(mean_difference) or not _has_value(twin_difference):
        return False
    return abs(mean_difference) > abs(twin_difference) + ZERO_TOLERANCE


def one_sided_claim_verdict(p_holm: float, p_holm_opposite: float, mean_difference: float, direction: int) -> str:
    """A claim tested one-sided both ways: ``supported`` when the claimed direction's Holm p < ``ALPHA`` and the mean
    paired difference has the claimed sign, ``contradicted`` when the opposite direction's does with the opposite
    sign, else ``inconclusive``."""
    if p_holm < ALPHA and np.sign(mean_difference) == direction:
        return "supported"
    if p_holm_opposite < ALPHA and np.sign(mean_difference) == -direction:
        return "contradicted"
    return "inconclusive"


def twin_claim_verdict(p_holm: float, p_holm_opposite: float, mean_difference: float, direction: int,
                       twin_difference: Optional[float]) -> str:
    """A primary claim's verdict under the null-twin rule (module docstring): ``no null twin`` without the twin's
    effect, ``not above the null twin`` when the claim's effect is not larger in size, else
    ``one_sided_claim_verdict``."""
    if twin_difference is None or not _has_value(twin_difference):
        return "no null twin"
    if not above_twin(mean_difference, twin_difference):
        return "not above the null twin"
    return one_sided_claim_verdict(p_holm, p_holm_opposite, mean_difference, direction)


def difference_verdict(p_holm: float, mean_difference: float) -> str:
    """A two-sided comparison's verdict: ``higher`` / ``lower`` when Holm p < ``ALPHA``, else ``no difference detected``."""
    if not p_holm < ALPHA:
        return "no difference detected"
    return "higher" if mean_difference > 0 else "lower"


def twin_effect(table: dict, task: str, baseline: str, endpoint: str, seeds: list) -> dict[str, Any]:
    """The baseline's null twin (``TWINS``) against the baseline on ``endpoint``, over ``seeds`` (a claim's paired
    seeds) where the twin has a value: ``twin``, ``twin_mean_difference`` (None without the twin or a pair),
    ``twin_seeds`` and ``twin_excluded``."""
    twin = TWINS.get(baseline)
    if twin is None or not table.get((task, twin)):
        return {"twin": twin, "twin_mean_difference": None, "twin_seeds": 0, "twin_excluded": []}
    paired, d, excluded = _paired(table, task, twin, baseline, endpoint, seeds=seeds)
    return {"twin": twin, "twin_mean_difference": float(d.mean()) if len(d) else None, "twin_seeds": len(paired),
            "twin_excluded": excluded}


def score_claims(table: dict, tasks: list[str], claims) -> list[dict[str, Any]]:
    """Every claim (``Claim``) on every task both of its methods ran: the paired row tested one-sided in the
    claimed direction (``p``; the two-sided p beside it as ``p_two_sided``) and in the opposite one
    (``p_opposite``), the seeds whose nonzero difference has the claimed sign (and the opposite one), the null
    twin's effect on the claim's seeds, Holm within each paper's rows (its family) for each direction, and
    ``twin_claim_verdict``.

    ``table`` is ``{(task, method): {seed: {endpoint: value}}}`` (``endpoint_table``'s form); a seed
    pairs when both runs have a value of the endpoint, and every other seed is listed as excluded.
    """
    rows = []
    for task in tasks:
        for claim in claims:
            row = paired_row(table, task, claim.method, claim.baseline, claim.endpoint)
            if row is not None:
                differences = row["per_seed"]
                signed = nonzero_differences(differences) * claim.direction
                test, p = one_sided_test(claim.endpoint, differences, claim.direction)
                _, p_opposite = one_sided_test(claim.endpoint, differences, -claim.direction)
                rows.append({"id": claim.id, "paper": claim.paper, "claim": claim.text, "direction": claim.direction,
                             **row, "test": test, "p": p, "p_opposite": p_opposite, "p_two_sided": row["p"],
                             "smallest_p": smallest_exact_p(len(signed), sides=1),
                             "seeds_as_claimed": int((signed > 0).sum()), "seeds_against": int((signed < 0).sum()),
                             **twin_effect(table, task, claim.baseline, claim.endpoint, row["paired_seeds"])})
    for paper in sorted({row["paper"] for row in rows}):
        family = [row for row in rows if row["paper"] == paper]
        for row, adjusted in zip(family, holm([row["p_opposite"] for row in family])):
            row["p_holm_opposite"] = adjusted
        holm_family(family, sides=1)
    for row in rows:
        row["verdict"] = ("no pairs" if row["seeds"] == 0 else
                          twin_claim_verdict(row["p_holm"], row["p_holm_opposite"], row["mean_difference"], row["direction"],
                                             row["twin_mean_difference"]))
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
            row["verdict"] = "no pairs" if row["seeds"] == 0 else difference_verdict(row["p_holm"], row["mean_difference"])
    states = {f"{task}/{method}": dict(Counter(e["end_state"] for e in seeds.values())) for (task, method), seeds in sorted(table.items())}
    return {"rule": __doc__, "alpha": ALPHA, "primary": primary, **families, "end_states": states,
            "endpoints": {f"{t}/{m}": {str(s): e for s, e in seeds.items()} for (t, m), seeds in sorted(table.items())}}
