"""Build the demo's tiny Qwen2 (random init, head_dim 64) and warm-start it on the tag format.

    python examples/cpu_demo/build_model.py OUT_DIR

The warm start is a few seconds of supervised training on well-formed responses with random
digits, so RL starts from a policy that writes the format and answers even about half the
time. No download: model and tokenizer come from configs (gtpo_verl/cpu/tiny_model.py).
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from task import TAGS, formatted_response, prompts  # noqa: E402


def warm_start(path: str, steps: int = 60, batch: int = 32, lr: float = 5e-3, seed: int = 0) -> float:
    """Teacher-forced training on (prompt, formatted response) pairs; returns the final loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    pool = prompts(256, seed + 1)
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        input_ids, labels = [], []
        for _ in range(batch):
            chat = [{"role": "user", "content": rng.choice(pool)}]
            prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
            if hasattr(prompt_ids, "keys"):  # BatchEncoding in transformers 5
                prompt_ids = prompt_ids["input_ids"]
            answer_ids = tokenizer.encode(formatted_response(rng)) + [tokenizer.eos_token_id]
            input_ids.append(list(prompt_ids) + answer_ids)
            labels.append([-100] * len(prompt_ids) + answer_ids)
        width = max(len(ids) for ids in input_ids)
        pad = tokenizer.pad_token_id
        ids = torch.tensor([x + [pad] * (width - len(x)) for x in input_ids])
        lab = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
        attention = (torch.arange(width)[None] < torch.tensor([len(x) for x in input_ids])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=attention, labels=lab).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss_value = float(loss.detach())
    model.save_pretrained(path, safe_serialization=True)
    return loss_value


def main(out_dir: str) -> None:
    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2

    build_tiny_qwen2(out_dir, extra_tokens=TAGS)
    print(f"warm-start loss {warm_start(out_dir):.3f}; model in {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/demo/tiny_qwen2")
