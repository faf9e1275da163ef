"""Entropy audit, offline: prove that each old-policy entropy value reaching an estimator sits on its own token.

    gtpo-audit DIR [--weights HF_DIR] [--out report.json]     # or python -m gtpo_verl.tools.audit

Checks each dump a run wrote with ``gtpo.audit.steps=[k, …]`` and ``gtpo.audit.dir=DIR``
(``trainer/audit_dump.py``):

- advantages: recomputed with the estimator's own ``run`` from its table row
  (``plugin/estimators/``) on the dumped inputs (max abs diff ≤ 1e-6);
- entropy: recomputed outside verl with plain ``transformers`` from an HF-format copy of the
  weights the step's old-log-prob pass used (the initial model for step 1; for step k > 1 the
  checkpoint of step k-1, saved by verl with ``hf_model`` in
  ``actor_rollout_ref.actor.checkpoint.save_contents``), on temperature-scaled logits at the
  rollout temperature, over every valid token of every non-padding row (max abs diff ≤ 1e-3).

It prints a JSON report (``rows_checked``, ``tokens_checked``, ``entropy_max_abs_diff``,
``advantage_max_abs_diff``, ``passed``) and exits 1 when a check fails. A folder, dump or weights it
cannot read is one line on stderr and exit status 2. Dumps are read without unpickling
(``trainer/audit_dump.py``): a crafted file runs nothing.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Optional

import torch

from gtpo_verl.plugin.estimators import ESTIMATORS, EstimatorBatch
from gtpo_verl.tools.cli import ArgumentParser, fail
from gtpo_verl.trainer.audit_dump import DUMP_PATTERN, AuditDumpError, load_audit_step

ENTROPY_TOLERANCE = 1e-3
ADVANTAGE_TOLERANCE = 1e-6


def recompute_advantages(record: dict) -> torch.Tensor:
    """The estimator's advantages from the dumped inputs, through its table row's ``run`` (the pure function)."""
    from omegaconf import OmegaConf

    estimator = record["estimator"]
    row = ESTIMATORS.get(estimator)
    if row is None:
        raise ValueError(f"{estimator!r} is not one of gtpo_verl's estimators {list(ESTIMATORS)}")
    batch = EstimatorBatch.build(
        f"the audit of step {record['step']}", record["scores"], record["response_mask"], record["uids"],
        record["initial_entropy"], entropys=record["entropys"], responses=record["responses"],
    )
    block = row.config.from_algorithm_config(OmegaConf.create(record["algorithm"]))
    return row.run(block, batch).advantages.to(torch.float32)


def recompute_entropy(record: dict, weights: str, rows_per_pass: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token entropy of the non-padding rows with plain transformers: ``(entropy, valid)`` as ``(R, T)``.

    H_t = logsumexp(z) - Σ softmax(z)·z with z = logits / temperature, the logits at the position
    before each response token (the model predicting it from the prompt and earlier response).
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    real = [i for i, pad in enumerate(record["is_padding"]) if not pad]
    width = record["response_mask"].shape[-1]
    out = torch.zeros(len(real), width, dtype=torch.float32)
    for start in range(0, len(real), rows_per_pass):  # bounded memory; each pass is one batched forward
        rows = real[start : start + rows_per_pass]
        prompts = [record["prompt_ids"][i] for i in rows]
        responses = [record["response_ids"][i][:width] for i in rows]
        sequences = [p + r for p, r in zip(prompts, responses)]
        length = max(len(s) for s in sequences)
        input_ids = torch.zeros(len(rows), length, dtype=torch.int64)
        attention = torch.zeros(len(rows), length, dtype=torch.int64)
        for j, seq in enumerate(sequences):  # right padding: valid positions keep ids 0..L-1
            input_ids[j, : len(seq)] = torch.tensor(seq)
            attention[j, : len(seq)] = 1
        positions = torch.arange(length).expand(len(rows), -1)
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits.float()
        logits = logits / record["temperature"]
        prompt_len = torch.tensor([len(p) for p in prompts])
        take = (prompt_len.unsqueeze(1) - 1 + torch.arange(width)).clamp(max=length - 1)
        z = logits.gather(1, take.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        entropy = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
        out[start : start + len(rows)] = entropy
    valid = record["response_mask"][real] > 0
    return out, valid


def check_step(record: dict, weights: Optional[str] = None) -> dict:
    """Both checks for one dump; returns the figures."""
    mask = record["response_mask"] > 0
    recomputed = recompute_advantages(record)
    advantage_diff = float((torch.where(mask, recomputed, 0.0) - torch.where(mask, record["advantages"], 0.0)).abs().max())
    padding = torch.tensor(record["is_padding"], dtype=torch.bool)
    padding_nonzero = bool(record["advantages"][padding].abs().sum() > 0) if bool(padding.any()) else False

    weights = weights or record["weights"]
    if not os.path.isdir(weights):
        raise FileNotFoundError(
            f"step {record['step']}: no HF-format weights at {weights}; the old-log-prob pass of step k uses the "
            "weights saved at step k-1: run with trainer.save_freq=1 and hf_model in "
            "actor_rollout_ref.actor.checkpoint.save_contents (or pass --weights)"
        )
    entropy, valid = recompute_entropy(record, weights)
    dumped = record["entropys"][~padding]
    entropy_diff = float((entropy - dumped)[valid].abs().max()) if bool(valid.any()) else float("nan")
    return {
        "step": record["step"],
        "estimator": record["estimator"],
        "weights": weights,
        "rows": len(record["uids"]),
        "rows_checked": int((~padding).sum()),
        "padding_rows": int(padding.sum()),
        "tokens_checked": int(valid.sum()),
        "entropy_max_abs_diff": entropy_diff,
        "advantage_max_abs_diff": advantage_diff,
        "padding_advantages_zero": not padding_nonzero,
    }


def check_audit_dir(directory: str, weights: Optional[str] = None) -> dict:
    """Check every dump in ``directory``; the report ``make demo-cluster`` puts in its summary."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a folder: give the run's gtpo.audit.dir")
    paths = sorted(glob.glob(os.path.join(directory, DUMP_PATTERN.format(step="*"))))
    if not paths:
        raise FileNotFoundError(f"no audit dumps ({DUMP_PATTERN.format(step='<k>')}) in {directory}: run with gtpo.audit.steps=[k] gtpo.audit.dir={directory}")
    steps = [check_step(_checked_record(load_audit_step(p), p), weights) for p in paths]
    entropy_diff = max(s["entropy_max_abs_diff"] for s in steps)
    advantage_diff = max(s["advantage_max_abs_diff"] for s in steps)
    return {
        "steps": steps,
        "rows_checked": sum(s["rows_checked"] for s in steps),
        "tokens_checked": sum(s["tokens_checked"] for s in steps),
        "padding_rows": sum(s["padding_rows"] for s in steps),
        "entropy_max_abs_diff": entropy_diff,
        "advantage_max_abs_diff": advantage_diff,
        "entropy_tolerance": ENTROPY_TOLERANCE,
        "advantage_tolerance": ADVANTAGE_TOLERANCE,
        "passed": bool(
            entropy_diff <= ENTROPY_TOLERANCE
            and advantage_diff <= ADVANTAGE_TOLERANCE
            and all(s["padding_advantages_zero"] and s["tokens_checked"] > 0 for s in steps)
        ),
    }


_RECORD_KEYS = ("step", "estimator", "algorithm", "initial_entropy", "temperature", "weights", "uids", "is_padding", "prompt_ids",
                "response_ids", "response_mask", "entropys", "responses", "scores", "advantages")


def _checked_record(record: dict, path: str) -> dict:
    """``record`` if it holds every field the checks read, with matching row counts; else an ``AuditDumpError``."""
    missing = [k for k in _RECORD_KEYS if k not in record]
    if missing:
        raise AuditDumpError(f"{path}: fields {missing} are missing: not a complete audit dump")
    rows = record["response_mask"].shape[0]
    uneven = [k for k in ("uids", "is_padding", "prompt_ids", "response_ids", "entropys", "responses", "scores", "advantages")
              if len(record[k]) != rows]
    if uneven:
        raise AuditDumpError(f"{path}: fields {uneven} do not have the {rows} rows of response_mask: the dump is corrupt")
    return record


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="gtpo-audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="gtpo.audit.dir of the run")
    parser.add_argument("--weights", help="HF-format weights to use instead of the ones each dump names")
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args(argv)
    try:
        report = check_audit_dir(args.dir, args.weights)
    except (FileNotFoundError, AuditDumpError, ValueError, OSError) as err:
        fail(parser.prog, str(err))
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
