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


def _prompt_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # BatchEncoding in transformers 5


def warm_start(path: str, steps: int = 200, batch: int = 32, lr: float = 3e-3, seed: int = 0) -> float:
    """Teacher-forced training on (prompt, random-digit formatted response); returns the last loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    pool = [text for text, _ in problems(256, seed + 1)]
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        inputs, labels = [], []
        for _ in range(batch):
            prompt_ids = _prompt_ids(tokenizer, rng.choice(pool))
            answer_ids = tokenizer.encode(formatted_response(rng)) + [tokenizer.eos_token_id]
            inputs.append(prompt_ids + answer_ids)
            labels.append([-100] * len(prompt_ids) + answer_ids)
        width = max(map(len, inputs))
        ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in inputs])
        lab = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
        attention = (torch.arange(width)[None] < torch.tensor([len(x) for x in inputs])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=attention, labels=lab).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        loss_value = float(loss.detach())
    model.save_pretrained(path, safe_serialization=True)
    return loss_value


def build(out_dir: str, seed: int = 0) -> str:
    """Tiny Qwen2 (2 layers, hidden 128) + byte tokenizer with the tags, warm-started; returns ``out_dir``."""
    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2

    build_tiny_qwen2(out_dir, extra_tokens=TAGS, seed=seed)
    print(f"warm-start loss {warm_start(out_dir, seed=seed):.3f}; model in {out_dir}")
    return out_dir


def measure(model_dir: str, count: int = 32, samples: int = 16, seed: int = 1, max_new_tokens: int = 16) -> dict:
    """Step-0 pass@k of ``model_dir`` on ``count`` validation problems, ``samples`` each (temperature 1)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gtpo_verl.algorithms.pass_at_k import pass_at_k, pass_ks

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    correct, formatted, nine = [], 0, 0
    for text, answer in problems(count, seed):  # the study's val.parquet uses the same seed
        ids = torch.tensor([_prompt_ids(tokenizer, text)])
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
