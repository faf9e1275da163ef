"""Build the demo's tiny Qwen2 (random init, head_dim 64) and warm-start it on the tag format.

    python examples/cpu_demo/build_model.py OUT_DIR

The warm start is a few seconds of supervised training on well-formed responses with random
digits, so RL starts from a policy that writes the format and answers even about half the
time. No download: model and tokenizer come from configs (gtpo_verl/cpu/tiny_model.py).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from task import TAGS, formatted_response, prompts  # noqa: E402

WARM_START_STEPS, WARM_START_LR = 60, 5e-3


def build(out_dir: str, seed: int = 0) -> float:
    """The tiny Qwen2 with the tags as single tokens, warm-started on (prompt, random-digit response); returns the last loss."""
    from gtpo_verl.cpu.tiny_model import build_tiny_qwen2, warm_start

    build_tiny_qwen2(out_dir, extra_tokens=TAGS)
    return warm_start(out_dir, prompts(256, seed + 1), formatted_response, steps=WARM_START_STEPS, lr=WARM_START_LR, seed=seed)


def main(out_dir: str) -> None:
    print(f"warm-start loss {build(out_dir):.3f}; model in {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/demo/tiny_qwen2")
