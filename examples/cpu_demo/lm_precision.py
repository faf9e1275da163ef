"""What the actor's compute dtype changes on the real step: float32 against bf16, side by side.

    .venv-demo/bin/python -m benchmarks.bench_lm_actor --settings lm_demo_fp32,lm_demo --repeats 1 --no-model-floor --dump DIR
    .venv-demo/bin/python examples/cpu_demo/lm_precision.py DIR [--out docs/real_lm/precision.json]

``bench_lm_actor --dump`` runs verl's own old-log-prob pass (the FSDP2 actor, the real-LM demo's
settings) on the committed step (``tests/fixtures/lm/dapo_token_step1``) with the initial model,
once per dtype, and keeps its entropies and log-probs. This script compares each with the
fixture's own entropies (which a float32 pipeline wrote) and with each other, and recomputes the
page's mechanism numbers (``lm_mechanism.analyse_fixture``) and GTPO's advantages (through verl's
registry) from each, so that what bf16 moves is stated next to what it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lm", "dapo_token_step1")
sys.path.insert(0, HERE)

from lm_mechanism import analyse_fixture  # noqa: E402

DUMPS = {"fp32": "lm_demo_fp32", "bf16": "lm_demo"}  # dtype → bench_lm_actor's setting


def fixture_with_entropy(entropy: np.ndarray, folder: str) -> str:
    """A copy of the fixture whose ``entropys`` are ``entropy``; returns its stem."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(FIXTURE + ".safetensors")
    tensors["entropys"] = entropy.astype(np.float32)
    stem = os.path.join(folder, "step")
    save_file(tensors, stem + ".safetensors")
    shutil.copy(FIXTURE + ".json", stem + ".json")
    return stem


def gtpo_advantages(stem: str, alpha2: float | None = None) -> np.ndarray:
    """``gtpo_token``'s advantages from the stem's inputs, through verl's registry and the stem's config
    (with ``alpha2`` in place of its α₂ when given: 0 is the same normalisation without the entropy)."""
    import torch
    from omegaconf import OmegaConf
    from safetensors.torch import load_file
    from verl.trainer.ppo import core_algos

    import gtpo_verl.plugin.registry  # noqa: F401  (registers the estimators)
    from gtpo_verl.plugin.context import bind_estimator_inputs

    tensors = load_file(stem + ".safetensors")
    with open(stem + ".json") as f:
        meta = json.load(f)
    mask = tensors["response_mask"].float()
    algorithm = OmegaConf.create(meta["algorithm"])
    if alpha2 is not None:
        algorithm.gtpo_token.alpha2 = alpha2
    with bind_estimator_inputs(entropys=tensors["entropys"], responses=tensors["responses"]):
        advantages, _ = core_algos.get_adv_estimator_fn("gtpo_token")(
            token_level_rewards=tensors["token_level_rewards"], response_mask=mask,
            index=np.array(meta["uids"], dtype=object), config=algorithm)
    return (advantages * mask).numpy().astype(np.float64)


def differences(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> dict:
    gap = np.abs(a - b)[mask]
    return {"max_abs": float(gap.max()), "mean_abs": float(gap.mean()), "p99_abs": float(np.quantile(gap, 0.99))}


def mechanism_digest(result: dict) -> dict:
    """The numbers docs/real_lm.md gives for a batch."""
    profile, gtpo = result["profile"], result["gtpo_token"]
    return {
        "token_mean_entropy": profile["token_mean"], "median": profile["median"],
        "share_above_0.7": profile["share_above_0.7"], "top20_entropy_share": profile["top20_share"],
        "delta_filtered": result["delta"],
        "bonus_share_on_top20": gtpo["bonus_share_on_top20"],
        "token_share_top20_of_successes": gtpo["token_share_top20_of_successes"],
        "success_tokens_alone_in_column": gtpo["success_tokens_alone_in_column"],
        "grpo_s_weights": result["grpo_s"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", help="bench_lm_actor's --dump folder")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from safetensors.numpy import load_file

    fixture = load_file(FIXTURE + ".safetensors")
    mask = fixture["response_mask"].astype(bool)
    passes = {dtype: load_file(os.path.join(args.dump, f"{setting}.safetensors")) for dtype, setting in DUMPS.items()}
    stored_advantages = fixture["advantages"].astype(np.float64) * mask
    report = {"fixture": {"mechanism": mechanism_digest(analyse_fixture(FIXTURE))}}
    for dtype, tensors in passes.items():
        entropy = tensors["entropys"].astype(np.float64)
        with tempfile.TemporaryDirectory() as folder:
            stem = fixture_with_entropy(entropy, folder)
            report[dtype] = {
                "entropy_vs_fixture": differences(entropy, fixture["entropys"].astype(np.float64), mask),
                "gtpo_advantage_vs_fixture": differences(gtpo_advantages(stem), stored_advantages, mask),
                "mechanism": mechanism_digest(analyse_fixture(stem)),
            }
    report["bf16_vs_fp32"] = {
        "entropy": differences(passes["bf16"]["entropys"].astype(np.float64), passes["fp32"]["entropys"].astype(np.float64), mask),
        "old_log_prob": differences(passes["bf16"]["old_log_probs"].astype(np.float64),
                                    passes["fp32"]["old_log_probs"].astype(np.float64), mask),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
