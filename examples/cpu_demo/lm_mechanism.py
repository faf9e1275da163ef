"""What each method's mechanism does on one real batch of a pretrained LM (docs/real_lm.md).

    .venv-demo/bin/python examples/cpu_demo/lm_mechanism.py FIXTURE_STEM [--demo-summary outputs/demo_lm/summary.json] [--out results.json]

Every number is computed from the committed audit fixture (``lm_fixture.py``: safetensors + JSON)
over its non-padding rows by ``gtpo-mechanism``'s report (``gtpo_verl/tools/mechanism.py``, which
runs the estimator table's own equations on the fixture's inputs); this script adds what needs the
fixture's token texts (the token classes), the dynamic-sampling evictions of its step, the same
entropy profile of the lab's three tasks at their warm start and of the CPU demo's tiny random-init
model (``tests/fixtures/lab/real_step_gtpo_token.json``), so the three are comparable, and the
page's tables.

Definitions (H_{i,t} the old-policy entropy, o_i the valid tokens of response i, ⟨H⟩_i their mean):

- entropy profile and Paper A's δ at 0.7, ln 2 and 1.5·⟨H⟩_ini: ``gtpo_verl.lab.entropy_profile``
  and ``algorithms.trajectory.entropy_filter`` (⟨H⟩_ini is the dump's, else the batch's mean ⟨H⟩_i:
  at step 1, the initial model's);
- GTPO-token's bonus (S18, ``algorithms.token_shaping.column_share``): on each group's successes,
  b_{i,t} = H_{i,t} / Σ_{k∈O+_t} H_{k,t} · d_t (α2 cancels in a share); the share of Σ b landing on
  each success response's top ⌈0.2·|o_i|⌉ entropy tokens, and the token classes of those tokens
  (``token_class``); the share of success tokens alone in their column (d_t = 1), where b = 1
  whatever the entropy (the estimator's health hook).
- GRPO-S (S31): the success weights Ĥ_i / Σ_{k∈O+} Ĥ_k · n (the estimator's ``success_share``, mean 1
  in every group): min, max, std (population) and the 10th / 90th percentiles over all successes.
- the conflict mask (A.3): A_i = r_i − mean_group(r); for responses with A_i ≠ 0 the leading runs
  k_f, k_b of positions whose token some opposite-sign response of the group shares at the same
  position from the start (forward) or from its own end (backward), as ``gtpo_traj`` computes them;
  the share of those responses' valid tokens in F_i ∪ B_i, and the token classes of the tokens in the runs.
- all-equal groups: the groups verl's dynamic sampling evicted at that step
  (``training/filter_groups/evicted_samples``) over the groups it generated (kept + evicted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

from gtpo_verl.lab.entropy_profile import delta_filter, entropy_profile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEMO_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lab", "real_step_gtpo_token.json")
CLASSES = ("digit", "operator", "word", "format")
OPERATORS = set("+-=*/×÷")
SCALED_RATIO = "1.5"  # the page's "δ scaled to the model": 1.5·⟨H⟩_ini


def token_class(text: str) -> str:
    """``digit`` (holds a digit), ``operator`` (+ − = * / alone), ``word`` (holds a letter), else ``format``
    (whitespace, punctuation, the chat's special tokens such as ``<|im_end|>``)."""
    if re.fullmatch(r"<\|[^|]*\|>", text.strip()):
        return "format"
    if any(c.isdigit() for c in text):
        return "digit"
    if text.strip() and set(text.strip()) <= OPERATORS:
        return "operator"
    if any(c.isalpha() for c in text):
        return "word"
    return "format"


def fixture_record(stem: str) -> dict:
    """The fixture as an audit record (``load_audit_step``'s fields the mechanism report reads), plus its
    ``token_text`` and ``step_metrics``; nothing unpickled."""
    from safetensors.torch import load_file

    tensors = load_file(stem + ".safetensors")
    with open(stem + ".json") as f:
        meta = json.load(f)
    return {**{k: v for k, v in meta.items() if k != "format"}, **tensors}


def class_shares(ids: np.ndarray, selected: np.ndarray, token_text: dict, weights: np.ndarray | None = None) -> dict:
    """Share of the selected tokens (or of ``weights`` over them) by ``token_class``."""
    classes = np.array([token_class(token_text.get(str(i), "")) for i in ids[selected]])
    w = np.ones(classes.size) if weights is None else weights[selected]
    total = w.sum()
    return {c: float(w[classes == c].sum() / total) if total > 0 else 0.0 for c in CLASSES}


def top_pieces(ids: np.ndarray, selected: np.ndarray, token_text: dict, count: int = 12) -> list:
    values, counts = np.unique(ids[selected], return_counts=True)
    order = np.argsort(-counts, kind="stable")[:count]
    return [[token_text.get(str(int(values[i])), "?"), int(counts[i])] for i in order]


def analyse_fixture(stem: str) -> dict:
    from gtpo_verl.tools.mechanism import mechanism_report, run_estimators
    from gtpo_verl.trainer.health import all_equal_groups_frac

    record = fixture_record(stem)
    m = run_estimators(record)
    report = mechanism_report(m)
    batch, text = m.batch, record.get("token_text", {})
    ids, valid = batch.responses.numpy(), (batch.response_mask > 0).numpy()
    top20 = (m.top_tokens & m.success_tokens).numpy()
    runs = m.conflict_tokens.numpy()
    metrics = record.get("step_metrics", {})
    evicted = metrics.get("training/filter_groups/evicted_samples")
    kept = batch.num_groups
    delta, scaled = report["delta"], report["delta"]["ratios"][SCALED_RATIO]
    token = report["gtpo_token"]
    return {
        "fixture": {"rows": report["batch"]["rows"], "groups": kept, "tokens": report["batch"]["tokens"],
                    "estimator": record["estimator"], "step": record["step"], "pass_rate": report["batch"]["pass_rate"]},
        "profile": report["profile"],
        "delta": {"initial_entropy": delta["initial_entropy"], "scaled_threshold": scaled["threshold"],
                  "filtered_at_0.7": delta["filtered_at_0.7"], "filtered_at_ln2": delta["filtered_at_ln2"],
                  "filtered_at_scaled": scaled["filtered"]},
        "gtpo_token": {
            **{k: token[k] for k in ("bonus_share_on_top20", "success_tokens_alone_in_column", "successes_per_group",
                                     "entropy_share_on_top20_of_successes", "token_share_top20_of_successes")},
            "top20_token_classes": class_shares(ids, top20, text),
            "top20_bonus_classes": class_shares(ids, top20, text, m.bonus_share.numpy()),
            "all_token_classes": class_shares(ids, valid, text),
            "top20_most_common": top_pieces(ids, top20, text),
        },
        "grpo_s": {k: v for k, v in report["grpo_s"].items() if k != "entropy_moved_frac"},
        "conflict": {
            **report["conflict"],
            "run_token_classes": class_shares(ids, runs, text) if runs.any() else {},
            "run_most_common": top_pieces(ids, runs, text),
        },
        "all_equal": {"groups_in_batch_all_equal": round(all_equal_groups_frac(batch.sequence_scores, batch.group_ids) * kept),
                      "evicted_groups_at_step": evicted,
                      "evicted_share_at_step": None if evicted is None else float(evicted / (evicted + kept))},
        "step_metrics": {k: metrics[k] for k in sorted(metrics) if k.startswith(("timing_s/", "actor/pg_clipfrac", "training/filter_groups"))},
    }


def profile_of_demo_model(path: str = DEMO_FIXTURE) -> dict:
    """The CPU demo's tiny random-init Qwen2 after its warm start: step 1 of its DAPO_TOKEN run."""
    from gtpo_verl.trainer.audit_dump import load_audit_step

    record = load_audit_step(path)  # safetensors + JSON, nothing unpickled
    keep = ~np.asarray(record["is_padding"], dtype=bool)
    entropy = record["entropys"].double().numpy()[keep]
    mask = record["response_mask"].long().numpy()[keep]
    return {"profile": entropy_profile(entropy, mask), "delta": delta_filter(entropy, mask)}


def profile_of_lab_task(task_name: str, seeds=(0, 1, 2)) -> dict:
    """The lab's tiny policy at its warm start: one batch (8 prompts × 8 responses) per seed, pooled."""
    from gtpo_verl.lab.calibration import warm_start_batches

    entropy, mask, _ = warm_start_batches(task_name, seeds)
    return {"profile": entropy_profile(entropy, mask), "delta": delta_filter(entropy, mask), "seeds": list(seeds)}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def runs_digest(summary: dict) -> dict:
    """Per run of a ``run_lm_demo`` summary.json: cost, start → end of the curves, the mechanisms' logged shares."""
    out = {}
    for run, record in summary.items():
        if run.startswith("_"):
            continue
        curves = record.get("curves", {})

        def ends(key):
            series = [v for v in curves.get(key, []) if v is not None]
            return [series[0], series[-1]] if series else None

        peaks = record.get("peak_rss_mb", {})
        out[run] = {
            "steps": record["steps_completed"], "seconds_per_step": record["seconds_per_step"],
            "first_step_s": record["first_step_s"], "startup_s": record["startup_s"], "wall_s": record["wall_s"],
            "reward": ends("critic/score/mean"), "token_mean_entropy": ends("gtpo/entropy/batch_mean"),
            "response_length": ends("response_length/mean"), "length_cap_share": ends("response_length/clip_ratio"),
            "clipfrac_mean": _mean(curves.get("actor/pg_clipfrac", [])),
            "evicted_groups_per_step": record.get("evicted_groups_per_step"),
            "delta_filtered_per_step": [v for v in curves.get("gtpo/delta/filtered_frac", []) if v is not None] or None,
            "val_mean@4": record.get("validation", {}).get("val-core/openai/gsm8k/acc/mean@4"),
            "phases": record.get("phases", {}),
            "peak_rss_mb": {k: v for k, v in peaks.items() if k == "_tree_total_pss" or v >= 500},
        }
    return out


def _f(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(result: dict) -> str:
    """The page's tables (markdown) from a results.json."""
    batches = {"real LM, fixture (DAPO_TOKEN step 1)": result["real_lm"]}
    batches.update({f"real LM, {name}": value for name, value in result.get("real_lm_batches", {}).items()})
    batches.update({f"lab {name} (warm start)": result.get(f"lab_{name}") for name in ("digit_chain", "max_digit", "digit_sum")})
    batches["CPU demo's tiny Qwen2 (step 1)"] = result.get("demo_tiny_qwen2")
    lines = ["| batch | responses | mean length | token-mean H | median | p90 | share > 0.7 | top-10 % share | top-20 % share "
             "| δ filters at 0.7 | at ln 2 | at 1.5·⟨H⟩_ini (threshold) |", "|---" * 12 + "|"]
    for name, value in batches.items():
        if not value:
            continue
        p, d = value["profile"], value["delta"]
        lines.append(f"| {name} | {p['responses']} | {p['mean_length']:.1f} | {_f(p['token_mean'], 2)} | {_f(p['median'], 2)} "
                     f"| {_f(p['p90'], 2)} | {_f(p['share_above_0.7'])} | {_f(p['top10_share'])} | {_f(p['top20_share'])} "
                     f"| {_f(d['filtered_at_0.7'])} | {_f(d['filtered_at_ln2'])} | {_f(d['filtered_at_scaled'])} ({d['scaled_threshold']:.2f}) |")
    lines += ["", "| real-LM batch | successes | GTPO bonus on top-20 % tokens (their token share) | GRPO-S weight min / max / std "
              "| tokens in conflict runs | evicted groups at the step | clip fraction at the step |", "|---" * 7 + "|"]
    for name, value in batches.items():
        if not value or "gtpo_token" not in value:
            continue
        g, w, c, a = value["gtpo_token"], value["grpo_s"], value["conflict"], value["all_equal"]
        clip = value.get("step_metrics", {}).get("actor/pg_clipfrac")
        evicted = a["evicted_groups_at_step"]
        lines.append(f"| {name} | {w['successes']} | {_f(g['bonus_share_on_top20'])} ({_f(g['token_share_top20_of_successes'])}) "
                     f"| {_f(w['min'], 2)} / {_f(w['max'], 2)} / {_f(w['std'], 2)} | {_f(c['token_share_in_runs'])} "
                     f"| {'–' if evicted is None else int(evicted)} of {value['fixture']['groups'] + int(evicted or 0)} | {_f(clip, 4)} |")
    runs = result.get("demo_lm_runs", {})
    if runs:
        lines += ["", "| run | steps | s/step (first) | start-up s | reward first → last | token-mean H first → last "
                  "| length first → last | clip fraction | evicted groups / step | δ filtered / step | validation mean@4 |",
                  "|---" * 11 + "|"]
        for run, r in runs.items():
            pair = lambda v, d=2: "–" if not v else f"{v[0]:.{d}f} → {v[1]:.{d}f}"  # noqa: E731
            lines.append(f"| {run} | {r['steps']} | {_f(r['seconds_per_step'], 1)} ({_f(r['first_step_s'], 0)}) | {_f(r['startup_s'], 0)} "
                         f"| {pair(r['reward'], 3)} | {pair(r['token_mean_entropy'])} | {pair(r['response_length'], 1)} "
                         f"| {_f(r['clipfrac_mean'], 4)} | {r['evicted_groups_per_step'] or '–'} "
                         f"| {[round(x, 2) for x in r['delta_filtered_per_step']] if r['delta_filtered_per_step'] else '–'} "
                         f"| {_f(r['val_mean@4'])} |")
        lines += ["", "| run | generation | old log-probs + entropy | advantage (estimator) | actor update | weight sync "
                  "| peak RSS: FSDP actor / vLLM worker / whole tree (PSS) MiB |", "|---" * 7 + "|"]
        for run, r in runs.items():
            ph, pk = r["phases"], r["peak_rss_mb"]
            share = lambda k: "–" if f"{k}_share" not in ph else f"{ph[k + '_s']:.1f} s ({100 * ph[k + '_share']:.1f} %)"  # noqa: E731
            lines.append(f"| {run} | {share('gen')} | {share('old_log_prob')} | {share('adv')} | {share('update_actor')} "
                         f"| {share('update_weights')} | {_f(pk.get('ray::WorkerDict'), 0)} / {_f(pk.get('VLLM::Worker'), 0)} "
                         f"/ {_f(pk.get('_tree_total_pss'), 0)} |")
    fixture = result["real_lm"]
    lines += ["", "| tokens (fixture) | digit | operator | word | format |", "|---" * 5 + "|"]
    for label, key in (("all valid tokens", "all_token_classes"), ("top-20 % entropy tokens of successes", "top20_token_classes"),
                       ("GTPO bonus on those tokens", "top20_bonus_classes")):
        shares = fixture["gtpo_token"][key]
        lines.append(f"| {label} | " + " | ".join(_f(shares[c]) for c in CLASSES) + " |")
    shares = fixture["conflict"]["run_token_classes"]
    if shares:
        lines.append("| tokens in conflict runs | " + " | ".join(_f(shares[c]) for c in CLASSES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fixture", nargs="?", help="fixture stem (without .safetensors / .json)")
    parser.add_argument("--batch", action="append", default=[], metavar="NAME=STEM",
                        help="another real-LM batch (a fixture written by lm_fixture.py) to analyse the same way")
    parser.add_argument("--demo-summary", help="a run_lm_demo summary.json whose runs to digest (cost, curves, logged shares)")
    parser.add_argument("--out", help="write the numbers here as JSON")
    parser.add_argument("--markdown", metavar="RESULTS_JSON", help="print the page's tables from a results.json and exit")
    parser.add_argument("--compare", action=argparse.BooleanOptionalAction, default=True,
                        help="also profile the lab's tasks and the demo's tiny model")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            print(render(json.load(f)))
        return 0
    if not args.fixture:
        parser.error("a fixture stem is required (or --markdown RESULTS_JSON)")
    result = {"real_lm": analyse_fixture(args.fixture)}
    if args.batch:
        result["real_lm_batches"] = {name: analyse_fixture(stem) for name, stem in (b.split("=", 1) for b in args.batch)}
    if args.demo_summary:
        with open(args.demo_summary) as f:
            result["demo_lm_runs"] = runs_digest(json.load(f))
    if args.compare:
        result["demo_tiny_qwen2"] = profile_of_demo_model()
        for name in ("digit_chain", "max_digit", "digit_sum"):
            result[f"lab_{name}"] = profile_of_lab_task(name)
    text = json.dumps(result, indent=1, ensure_ascii=False)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(render(result) if args.compare else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
