"""The study's exploration task: "give the largest of three digits", in Paper A's tag format.

    python -m research.exploration_task build OUT_DIR     # tiny Qwen2 + warm start, no download
    python -m research.exploration_task measure OUT_DIR   # step-0 pass@1 / pass@16 (HF sampling)

Prompt: ``#<id>: the largest of the digits 3 7 1? Think in <reasoning></reasoning>, answer in
<answer></answer>.`` Response: ``<reasoning>…</reasoning><answer>7</answer>``. Reward: 1 for a
well-formed correct answer, else 0 (``acc`` the same, ``pred`` the answer for maj@n).

Why it discriminates. The warm start teaches the format and the answers' prior, never the rule:
the digit of a warm-start response is the max of three fresh random digits, unrelated to the
prompt. At step 0 an answer is right with probability sum_d P(max = d)^2 ≈ 0.18 (times the
format rate), while the right answer is among 16 samples for ≈ 89 % of problems: pass@1 is
low, pass@16 high, and groups of 8 are all-wrong about 26 % of the time (sparse reward). A
shortcut exists: always answering 9 is right 27 % of the time (P(max = 9) = 1 - 0.9^3). A
policy that collapses onto it raises pass@1 a little and drops pass@16 to the same 0.27; one
that keeps exploring (entropy) finds the per-prompt answer and keeps pass@16 high while pass@1
grows. Learning the rule (attend to the largest of three digits) is within reach of a 2-layer
model. So pass@1, pass@16 and entropy over steps separate collapse from exploration, the effect
Paper B (entropy, best@k) and Paper A (no entropy collapse without KL) claim.
"""

from __future__ import annotations

import os
import random
import re
import sys

DATA_SOURCE = "gtpo_study/max_digit"
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")  # single tokens of the tiny tokenizer
NUM_DIGITS = 3
ANSWER = re.compile(r"<reasoning>(.*?)</reasoning>\s*<answer>\s*(\d)\s*</answer>\s*$", re.DOTALL)


def problem(rng: random.Random) -> tuple[str, str]:
    """One prompt and its ground truth (the largest digit)."""
    digits = [rng.randint(0, 9) for _ in range(NUM_DIGITS)]
    text = (
        f"#{rng.randint(0, 999)}: the largest of the digits {' '.join(map(str, digits))}? "
        "Think in <reasoning></reasoning>, answer in <answer></answer>."
    )
    return text, str(max(digits))


def problems(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [problem(rng) for _ in range(count)]


def write_parquet(path: str, count: int, seed: int, split: str) -> str:
    """verl RL parquet rows: chat ``prompt``, ``data_source``, rule ``reward_model`` with the answer."""
    import pandas as pd

    rows = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": text}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index},
        }
        for index, (text, answer) in enumerate(problems(count, seed))
    ]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def parse_answer(solution_str: str):
    match = ANSWER.search(solution_str.strip())
    return None if match is None else match.group(2)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl custom reward: 1.0 for a well-formed correct answer, else 0.0; ``pred`` for maj@n."""
    answer = parse_answer(solution_str)
    correct = answer is not None and answer == str(ground_truth)
    return {"score": float(correct), "acc": float(correct), "pred": answer if answer is not None else "[no answer]"}


def formatted_response(rng: random.Random) -> str:
    """A well-formed response whose digit is drawn from the answers' prior, independent of the prompt.

    The digit is the max of three fresh random digits: the warm start learns the format and how
    often each answer is right overall (P(9) = 0.27, P(8) = 0.22, …), never the rule itself.
    """
    thought = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 3)))
    digit = max(rng.randint(0, 9) for _ in range(NUM_DIGITS))
    return f"<reasoning>{thought}</reasoning><answer>{digit}</answer>"


def build(out_dir: str, seed: int = 0) -> str:
    """Tiny Qwen2 (2 layers, hidden 128) + byte tokenizer with the tags, warm-started (200 steps, lr 3e-3
    annealed by cosine) on (prompt, prior-digit response) pairs; returns ``out_dir``."""
    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2, warm_start

    build_tiny_qwen2(out_dir, extra_tokens=TAGS, seed=seed)
    pool = [text for text, _ in problems(256, seed + 1)]
    loss = warm_start(out_dir, pool, formatted_response, steps=200, lr=3e-3, seed=seed, cosine=True)
    print(f"warm-start loss {loss:.3f}; model in {out_dir}")
    return out_dir


def measure(model_dir: str, count: int = 32, samples: int = 16, seed: int = 1, max_new_tokens: int = 16) -> dict:
    """Step-0 pass@k of ``model_dir`` on ``count`` validation problems, ``samples`` each (temperature 1)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gtpo_verl.algorithms.pass_at_k import pass_at_k, pass_ks
    from gtpo_verl.cpu.tiny_model import chat_prompt_ids

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    correct, formatted, nine = [], 0, 0
    for text, answer in problems(count, seed):  # the study's val.parquet uses the same seed
        ids = torch.tensor([chat_prompt_ids(tokenizer, text)])
        with torch.no_grad():
            out = model.generate(
                ids, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            )
        texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        answers = [parse_answer(t) for t in texts]
        correct.append(sum(a == answer for a in answers))
        formatted += sum(a is not None for a in answers)
        nine += answer == "9"
    n = np.full(count, samples)
    result = {f"pass@{k}": round(pass_at_k(n, correct, k), 4) for k in pass_ks(samples)}
    result.update(format_rate=round(formatted / (count * samples), 4), always_9_pass=round(nine / count, 4))
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("build", "measure"):
        print(__doc__.split("\n\n")[1])
        return 2
    if argv[0] == "build":
        build(argv[1])
    else:
        print(measure(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
