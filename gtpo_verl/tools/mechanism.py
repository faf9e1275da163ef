"""The mechanism report: what each method's entropy terms do on the batches a run trained on, from its audit dumps.

    gtpo-mechanism DIR [--json report.json] [--ratios 1,1.25,1.5,2]     # or python -m gtpo_verl.tools.mechanism

DIR is the run's ``gtpo.audit.dir`` (``step_<k>.json`` + ``step_<k>.safetensors``, written with
``gtpo.audit.steps=[k, …]``; read by ``trainer/audit_dump.load_audit_step``, nothing unpickled).
For every dump, over its non-padding rows, the three estimators of the table
(``plugin/estimators/``) are run with their table row's ``run`` on the dumped inputs, each with its
block of the run's ``algorithm`` config, and the report reads their results:

- entropy profile (``lab/entropy_profile.py``): median token entropy, the share of tokens above
  0.7 nats, the share of each response's entropy on its top 20 % tokens;
- δ (Paper A, S16, ``algorithms.trajectory.entropy_filter``): the share of responses δ removes at
  ``algorithm.gtpo_traj``'s threshold (its scope and gate as configured), at 0.7, at ln 2 and at
  each candidate ratio × ⟨H⟩_ini; ⟨H⟩_ini is the dump's (the trainer's) or, when it has none,
  this batch's (``algorithms.trajectory.initial_entropy``);
- the ⟨H⟩_ini gate (S16): whether it is on, and whether it is open (⟨H⟩_ini > δ: δ ≡ 1 for the run);
- GTPO-token (S18, ``algorithms.token_shaping.column_share`` on the estimator's O+): the share of
  success tokens alone in their column (d_t = 1, where the share is 1 whatever the entropy), and the
  bonus share on each success's top 20 % entropy tokens against their token share;
- GRPO-S (S31): the spread of the sequence shares Ĥ_i / mean_{O+} Ĥ (the estimator's ``success_share``);
- conflict runs (S12): the share of the valid tokens of responses with A_i ≠ 0 in their forward or
  backward run (``conflict_token_weights``: λ ≠ 1);
- each estimator's health hook (``trainer.health.method_health``): the zero-advantage share and how far
  the entropy moves the advantage from its entropy-free form.

It prints a table (one column per step) and, with ``--json``, writes the numbers. A folder without
dumps or a dump it cannot read is one line on stderr and exit status 2. ``gtpo-report`` draws the
same table for a run folder with audit dumps (its ``audit/`` or its ``gtpo.audit.dir``).
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from gtpo_verl.tools.cli import ArgumentParser, fail

# the files of ``trainer/audit_dump.DUMP_PATTERN`` (that module imports torch; gtpo-report looks for dumps without it)
DUMP_GLOB = "step_*.json"

CANDIDATE_RATIOS = (1.0, 1.25, 1.5, 2.0)
"""δ = ratio · ⟨H⟩_ini candidates the report prices (``algorithm.gtpo_traj.entropy_threshold_ratio``)."""
OFFICIAL_DELTA = 0.7  # Paper A's released δ in nats (the ``official`` preset)
HIGH_ENTROPY_FRACTION = 0.2  # each response's top ⌈0.2·|o_i|⌉ tokens by entropy
RUN_MARKER_WEIGHT = 2.0  # W of S12 for marking the runs: any W ≠ 1 gives λ ≠ 1 exactly on them
RECORD_KEYS = ("step", "estimator", "algorithm", "uids", "is_padding", "response_mask", "entropys", "responses", "scores")


@dataclass(frozen=True)
class Mechanism:
    """One dump through the estimator table: the batch (non-padding rows), each estimator's call, and the
    ``(B, T)`` masks the report counts over."""

    record: dict
    calls: dict  # estimator name → EstimatorCall
    initial_entropy: float
    initial_entropy_source: str  # "dump" (the trainer's ⟨H⟩_ini) or "batch" (this batch's mean ⟨H⟩_i)
    bonus_share: torch.Tensor  # (B, T) float64 S18 column share on O+ tokens, 0 elsewhere
    success_tokens: torch.Tensor  # (B, T) bool, O+ rows' valid tokens
    top_tokens: torch.Tensor  # (B, T) bool, each response's top 20 % entropy tokens (all rows)
    conflict_tokens: torch.Tensor  # (B, T) bool, valid tokens in a conflict run (λ ≠ 1)

    @property
    def batch(self):
        return next(iter(self.calls.values())).batch


def checked_record(record: dict, path: str) -> dict:
    """``record`` if it holds what the report reads, with matching row counts; else an ``AuditDumpError``."""
    from gtpo_verl.trainer.audit_dump import AuditDumpError

    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise AuditDumpError(f"{path}: fields {missing} are missing: not a complete audit dump")
    rows = record["response_mask"].shape[0]
    uneven = [k for k in ("uids", "is_padding", "entropys", "responses", "scores") if len(record[k]) != rows]
    if uneven:
        raise AuditDumpError(f"{path}: fields {uneven} do not have the {rows} rows of response_mask: the dump is corrupt")
    return record


def estimator_names() -> tuple[str, str, str]:
    """GTPO-token's, GRPO-S's and GTPO-trajectory's registered names, each read from its own module."""
    from gtpo_verl.plugin.estimators import grpo_s, gtpo_token, gtpo_traj

    return gtpo_token.NAME, grpo_s.NAME, gtpo_traj.NAME


def run_estimators(record: dict) -> Mechanism:
    """Every table estimator's ``run`` on the dump's non-padding rows, in float64, each with its block of the
    dump's ``algorithm`` config; plus the masks of the report."""
    import torch
    from omegaconf import OmegaConf

    from gtpo_verl.algorithms.token_shaping import column_share
    from gtpo_verl.algorithms.trajectory import conflict_token_weights, initial_entropy
    from gtpo_verl.lab.entropy_profile import top_mask
    from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch, EstimatorCall

    token_name, _, trajectory_name = estimator_names()
    real = ~torch.as_tensor(record["is_padding"], dtype=torch.bool)
    mask = record["response_mask"][real].to(torch.int64)
    entropy = record["entropys"][real].to(torch.float64)
    responses = record["responses"][real].to(torch.int64)
    scores = record["scores"][real].to(torch.float64)
    uids = [u for u, keep in zip(record["uids"], real.tolist()) if keep]
    if record.get("initial_entropy") is not None:
        initial, source = float(record["initial_entropy"]), "dump"
    else:
        initial, source = initial_entropy(mask, entropy=entropy), "batch"
    batch = EstimatorBatch.build(f"the mechanism report of step {record['step']}", scores, mask, uids, initial,
                                 entropys=entropy, responses=responses)
    algorithm = OmegaConf.create(record["algorithm"])
    calls = {}
    with torch.no_grad():
        for name, row in ESTIMATORS.items():
            block = row.config.from_algorithm_config(algorithm)
            calls[name] = EstimatorCall(name, block, batch, row.run(block, batch))
    valid = mask > 0
    token = calls[token_name].result
    success_tokens = valid & token.success[:, None]
    # S18: b_{i,t} = H_{i,t} · d_t / Σ_{k∈O+_t} H_{k,t} on O+ (the kernel clamps H at 0)
    bonus = column_share(entropy.clamp_min(0.0), success_tokens.to(torch.float64), batch.group_ids, batch.num_groups)
    traj = calls[trajectory_name].result
    lengths = valid.sum(-1)
    # S12: λ_{i,t} ≠ 1 exactly on the forward and backward runs of a response with A_i ≠ 0
    weights = conflict_token_weights(traj.forward_run, traj.backward_run, lengths, traj.raw_advantage, mask.shape[-1],
                                     conflict_weight=RUN_MARKER_WEIGHT, overlap="union")
    top = torch.from_numpy(top_mask(entropy.numpy(), mask.numpy(), HIGH_ENTROPY_FRACTION))
    return Mechanism(record=record, calls=calls, initial_entropy=initial, initial_entropy_source=source,
                     bonus_share=bonus, success_tokens=success_tokens, top_tokens=top,
                     conflict_tokens=valid & (weights != 1.0))


def _share(part, whole) -> Optional[float]:
    whole = float(whole)
    return float(part) / whole if whole else None


def delta_shares(m: Mechanism, ratios: Sequence[float] = CANDIDATE_RATIOS) -> tuple[dict, dict]:
    """(δ-filtered shares, the gate's state) from ``algorithm.gtpo_traj``'s call (S16)."""
    from gtpo_verl.algorithms.trajectory import LN2, entropy_filter

    _, _, trajectory_name = estimator_names()
    call = m.calls[trajectory_name]
    result, block = call.result, call.block
    nonempty = m.batch.response_mask.sum(-1) > 0
    responses = int(nonempty.sum())

    def filtered(threshold: float) -> Optional[float]:  # δ_i = 1[⟨H⟩_i ≤ δ], scope all, no gate
        keep = entropy_filter(result.mean_entropy, result.raw_advantage, threshold=threshold)
        return _share((~keep & nonempty).sum(), responses)

    threshold = block.threshold(m.initial_entropy)
    gate = bool(block.resolved_choices()["ini_entropy_gate"])
    delta = {
        "threshold": threshold,
        "filtered_at_threshold": _share((~result.keep & nonempty).sum(), responses),
        "filtered_at_0.7": filtered(OFFICIAL_DELTA),
        "filtered_at_ln2": filtered(LN2),
        "initial_entropy": m.initial_entropy,
        "initial_entropy_source": m.initial_entropy_source,
        "ratios": {f"{r:g}": {"threshold": r * m.initial_entropy, "filtered": filtered(r * m.initial_entropy)} for r in ratios},
    }
    state = {
        "ini_entropy_gate": gate,
        "initial_entropy": m.initial_entropy,
        "threshold": threshold,
        # S16: with the gate on and ⟨H⟩_ini > δ, δ ≡ 1 for the whole run
        "open": bool(gate and threshold is not None and m.initial_entropy > threshold),
    }
    return delta, state


def successes_per_group(group_ids: torch.Tensor, num_groups: int, success: torch.Tensor) -> list[int]:
    """|O+| of each group, the groups in the order their first response appears in the batch."""
    import torch

    counts = torch.zeros(num_groups, dtype=torch.int64).index_add_(0, group_ids, success.to(torch.int64))
    first = torch.full((num_groups,), group_ids.numel(), dtype=torch.int64).scatter_reduce(
        0, group_ids, torch.arange(group_ids.numel()), "amin")
    return counts[torch.argsort(first)].tolist()


def mechanism_report(m: Mechanism, ratios: Sequence[float] = CANDIDATE_RATIOS) -> dict:
    """The report of one dump (the JSON the command writes per step)."""
    import torch

    from gtpo_verl.lab.entropy_profile import entropy_profile
    from gtpo_verl.trainer.health import method_health

    token_name, sequence_name, trajectory_name = estimator_names()
    batch = m.batch
    mask, entropy, scores = batch.response_mask, batch.entropys, batch.sequence_scores
    valid = mask > 0
    real = torch.ones(mask.shape[0], dtype=torch.bool)
    health = {name: {k.rsplit("/", 1)[-1]: v for k, v in method_health(call, mask.to(torch.float32), real).items()}
              for name, call in m.calls.items()}
    delta, gate = delta_shares(m, ratios)

    token = m.calls[token_name].result
    top_success = m.top_tokens & m.success_tokens
    bonus, h = m.bonus_share, entropy.clamp_min(0.0)
    success_rows = token.success
    gtpo_token = {
        "entropy_share": m.calls[token_name].block.entropy_share,
        "success_tokens_alone_in_column": health[token_name].get("alone_in_column_frac"),
        "bonus_share_on_top20": _share(bonus[top_success].sum(), bonus[m.success_tokens].sum()),
        "token_share_top20_of_successes": _share(top_success.sum(), m.success_tokens.sum()),
        "entropy_share_on_top20_of_successes": _share(h[top_success].sum(), h[m.success_tokens].sum()),
        "successes_per_group": successes_per_group(batch.group_ids, batch.num_groups, success_rows),
        "entropy_moved_frac": health[token_name].get("entropy_moved_frac"),
    }

    grpo_s = m.calls[sequence_name].result
    weights = grpo_s.success_share[grpo_s.success].to(torch.float64)
    spread = {"successes": int(weights.numel()), "entropy_moved_frac": health[sequence_name].get("entropy_moved_frac")}
    if weights.numel():
        spread.update({"min": float(weights.min()), "max": float(weights.max()), "std": float(weights.std(unbiased=False)),
                       "p10": float(torch.quantile(weights, 0.1)), "p90": float(torch.quantile(weights, 0.9))})

    traj = m.calls[trajectory_name].result
    active = traj.raw_advantage != 0
    active_tokens = valid & active[:, None]
    conflict = {
        "active_responses": int(active.sum()),
        "token_share_in_runs": _share((m.conflict_tokens & active_tokens).sum(), active_tokens.sum()) or 0.0,
        "token_share_in_runs_all_valid": _share(m.conflict_tokens.sum(), valid.sum()) or 0.0,
    }
    return {
        "step": int(m.record["step"]),
        "estimator": m.record["estimator"],
        "batch": {"rows": int(mask.shape[0]), "groups": batch.num_groups, "tokens": int(valid.sum()),
                  "pass_rate": float((scores > 0).to(torch.float64).mean())},
        "profile": entropy_profile(entropy.numpy(), mask.numpy()),
        "delta": delta,
        "gate": gate,
        token_name: gtpo_token,
        sequence_name: spread,
        "conflict": conflict,
        "health": health,
    }


def dump_paths(directory: str) -> list[str]:
    """The dumps' records in ``directory``, by step."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a folder: give the run's gtpo.audit.dir")
    paths = glob.glob(os.path.join(directory, DUMP_GLOB))
    steps = {}
    for path in paths:
        name = os.path.basename(path)[len("step_"):-len(".json")]
        if name.isdigit():
            steps[int(name)] = path
    if not steps:
        raise FileNotFoundError(f"no audit dumps (step_<k>.json) in {directory}: "
                                f"run with gtpo.audit.steps=[k] gtpo.audit.dir={directory}")
    return [steps[k] for k in sorted(steps)]


def analyse_dir(directory: str, ratios: Sequence[float] = CANDIDATE_RATIOS) -> dict:
    """The report of every dump in ``directory``: ``{"dir", "steps": [one report per dump]}``."""
    from gtpo_verl.trainer.audit_dump import load_audit_step

    steps = []
    for path in dump_paths(directory):
        steps.append(mechanism_report(run_estimators(checked_record(load_audit_step(path), path)), ratios))
    return {"dir": os.path.abspath(directory), "steps": steps}


def find_audit_dir(folder: Optional[str], config: Optional[dict] = None) -> Optional[str]:
    """A run folder's audit dumps: its ``gtpo.audit.dir`` (as given, or relative to the folder), else its
    ``audit/`` (where the demos put them); None when neither holds a dump."""
    if not folder:
        return None
    candidates = []
    configured = (config or {}).get("gtpo.audit.dir")
    if configured and configured not in ("null", "None"):
        candidates += [configured] if os.path.isabs(configured) else [configured, os.path.join(folder, configured)]
    candidates.append(os.path.join(folder, "audit"))
    for candidate in candidates:
        if os.path.isdir(candidate) and glob.glob(os.path.join(candidate, DUMP_GLOB)):
            return candidate
    return None


# ------------------------------------------------------------------------------------------ table
def _f(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def table_rows(steps: list[dict]) -> list[list[str]]:
    """``[label, value per step]`` rows: the terminal's table and the report page's."""
    token_name, sequence_name, trajectory_name = estimator_names()
    rows: list[list[str]] = []

    def row(label: str, get, digits: int = 3):
        rows.append([label] + [_f(get(s), digits) for s in steps])

    row("responses / groups / tokens", lambda s: None)
    rows[-1][1:] = [f"{s['batch']['rows']} / {s['batch']['groups']} / {s['batch']['tokens']}" for s in steps]
    row("pass rate", lambda s: s["batch"]["pass_rate"])
    row("entropy: token median (nats)", lambda s: s["profile"]["median"])
    row("entropy: share of tokens > 0.7 nats", lambda s: s["profile"]["share_above_0.7"])
    row("entropy: share on each response's top 20 % tokens", lambda s: s["profile"]["top20_share"])
    row("⟨H⟩_ini (nats)", lambda s: s["delta"]["initial_entropy"])
    rows[-1][0] += " [" + ", ".join(sorted({s["delta"]["initial_entropy_source"] for s in steps})) + "]"
    row(f"δ (algorithm.{trajectory_name}, nats)", lambda s: s["delta"]["threshold"])
    row("δ filters at that δ (responses)", lambda s: s["delta"]["filtered_at_threshold"])
    row("δ filters at 0.7", lambda s: s["delta"]["filtered_at_0.7"])
    row("δ filters at ln 2", lambda s: s["delta"]["filtered_at_ln2"])
    for ratio in steps[0]["delta"]["ratios"] if steps else ():
        row(f"δ filters at {ratio}·⟨H⟩_ini", lambda s, r=ratio: s["delta"]["ratios"][r]["filtered"])
    row("⟨H⟩_ini gate on", lambda s: s["gate"]["ini_entropy_gate"])
    row("⟨H⟩_ini gate open (δ ≡ 1)", lambda s: s["gate"]["open"])
    row("GTPO-token: success tokens alone in their column", lambda s: s[token_name]["success_tokens_alone_in_column"])
    row("GTPO-token: bonus share on top-20 % tokens", lambda s: s[token_name]["bonus_share_on_top20"])
    row("GTPO-token: token share of those tokens", lambda s: s[token_name]["token_share_top20_of_successes"])
    row("GTPO-token: |A| moved by the entropy", lambda s: s[token_name]["entropy_moved_frac"], 4)
    row("GRPO-S: successes", lambda s: s[sequence_name]["successes"])
    row("GRPO-S: weight min / max", lambda s: None)
    rows[-1][1:] = [f"{_f(s[sequence_name].get('min'), 2)} / {_f(s[sequence_name].get('max'), 2)}" for s in steps]
    row("GRPO-S: weight std", lambda s: s[sequence_name].get("std"))
    row("GRPO-S: |A| moved by the entropy", lambda s: s[sequence_name]["entropy_moved_frac"], 4)
    row("conflict runs: share of active responses' tokens", lambda s: s["conflict"]["token_share_in_runs"])
    for name in (token_name, sequence_name, trajectory_name):
        row(f"{name}: zero advantages in mixed groups", lambda s, n=name: s["health"][n].get("zero_advantage_frac"))
    return rows


def render_table(report: dict) -> str:
    """The terminal table: one row per quantity, one column per step."""
    steps = report["steps"]
    header = ["step"] + [str(s["step"]) for s in steps]
    rows = [header] + table_rows(steps)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [f"mechanism report of {report['dir']} (estimator {', '.join(sorted({s['estimator'] for s in steps}))})"]
    for k, r in enumerate(rows):
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
        if k == 0:
            lines.append("-" * len(lines[-1]))
    return "\n".join(lines)


def _ratios(text: str) -> tuple[float, ...]:
    import argparse

    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each ratio must be a positive number, e.g. 1,1.25,1.5,2")
    return values


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="gtpo-mechanism", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="gtpo.audit.dir of the run (its step_<k>.json + .safetensors dumps)")
    parser.add_argument("--json", metavar="OUT", help="also write the report here as JSON")
    parser.add_argument("--ratios", type=_ratios, default=CANDIDATE_RATIOS,
                        help="candidate δ ratios of ⟨H⟩_ini, comma-separated (default 1,1.25,1.5,2)")
    args = parser.parse_args(argv)
    try:
        report = analyse_dir(args.dir, args.ratios)
    except (FileNotFoundError, ValueError, OSError) as err:  # AuditDumpError is a ValueError
        fail(parser.prog, str(err))
    print(render_table(report))
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1, ensure_ascii=False)
                f.write("\n")
        except OSError as err:
            fail(parser.prog, f"{args.json}: {err.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
