"""Each training recipe runs its paper's settings: the DAPO runs share every key outside their
algorithm block, GTPO-trajectory and its GRPO baseline differ only in theirs, and every knob follows
the environment.
"""

import re

import pytest
from omegaconf import OmegaConf

from support.launchers import run_script
from support.recipes import DAPO, PAPER_A, as_dict, composed, launched_overrides

# verl warns that GRPO-style estimators run without a critic: expected for every recipe here
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")


def test_dapo_runs_share_every_setting_outside_the_algorithm_block(launched):
    algorithm_block = re.compile(
        r"^(algorithm\.adv_estimator|algorithm\.adv_transforms|algorithm\.(gtpo_token|grpo_s|gtpo_traj)\..*"
        r"|actor_rollout_ref\.actor\.policy_loss\..*"
        r"|actor_rollout_ref\.actor\.loss_agg_mode|trainer\.experiment_name|trainer\.default_local_dir)$"
    )
    runs = {DAPO[s]: as_dict(launched[s][1]) for s in DAPO}
    shared = {name: {k: v for k, v in ov.items() if not algorithm_block.match(k)} for name, ov in runs.items()}
    base = shared["Qwen2.5-32B-DAPO_step1"]
    for name, settings in shared.items():
        assert settings == base, f"{name} drifts from DAPO_step1: {set(settings.items()) ^ set(base.items())}"

    block = {name: {k: v for k, v in ov.items() if algorithm_block.match(k)} for name, ov in runs.items()}
    assert block["Qwen2.5-32B-DAPO_step1"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_TOKEN"]["algorithm.adv_estimator"] == "gtpo_token"
    assert block["Qwen2.5-32B-DAPO_SEQ"]["algorithm.adv_estimator"] == "grpo_s"
    assert block["Qwen2.5-32B-DAPO_SEQ"]["actor_rollout_ref.actor.policy_loss.loss_mode"] == "grpo_s"
    # the two entropy baselines: DAPO's estimator plus one transform at the papers' defaults
    assert block["Qwen2.5-32B-DAPO_HIGH_ENTROPY"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_HIGH_ENTROPY"]["algorithm.adv_transforms"] == (
        "[{name:high_entropy_tokens,rho:0.2,normalize_over:valid}]"
    )
    assert block["Qwen2.5-32B-DAPO_ENTROPY_ADV"]["algorithm.adv_estimator"] == "grpo"
    assert block["Qwen2.5-32B-DAPO_ENTROPY_ADV"]["algorithm.adv_transforms"] == "[{name:entropy_advantage,alpha:0.4,kappa:2.0}]"
    assert not any("algorithm.adv_transforms" in b for n, b in block.items() if n.endswith(("step1", "TOKEN", "SEQ")))
    # the loss aggregation is the only non-algorithm key an algorithm block changes: GRPO-S's (1/G)Σ_i
    agg = {name: b["actor_rollout_ref.actor.loss_agg_mode"] for name, b in block.items()}
    assert agg == {
        "Qwen2.5-32B-DAPO_step1": "token-mean",
        "Qwen2.5-32B-DAPO_TOKEN": "token-mean",
        "Qwen2.5-32B-DAPO_SEQ": "seq-mean-token-mean",
        "Qwen2.5-32B-DAPO_HIGH_ENTROPY": "token-mean",
        "Qwen2.5-32B-DAPO_ENTROPY_ADV": "token-mean",
    }
    for name, b in block.items():
        assert b["trainer.experiment_name"] == name and b["trainer.default_local_dir"].endswith(f"/DAPO/{name}")


@pytest.mark.parametrize("script", sorted(DAPO))
def test_dapo_settings(script, launched):
    calls, cfg = launched[script][0], composed(launched, script)
    a, r, alg, data, t = (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm, cfg.data, cfg.trainer)
    assert (a.clip_ratio_low, a.clip_ratio_high, a.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert not (a.use_kl_loss or alg.use_kl_in_reward) and a.kl_loss_coef == 0 and alg.kl_ctrl.kl_coef == 0
    assert a.entropy_coeff == 0
    assert (alg.filter_groups.enable, alg.filter_groups.metric, alg.filter_groups.max_inflight_gen_batches) == (True, "acc", 3)
    assert cfg.reward.reward_manager.name == "dapo"
    assert OmegaConf.to_container(cfg.reward.reward_kwargs) == {
        "overlong_buffer_cfg": {"enable": True, "len": 4096, "penalty_factor": 1.0, "log": False},
        "max_resp_len": 20480,
    }
    assert (data.max_prompt_length, data.max_response_length) == (2048, 20480)
    assert (data.train_batch_size, r.n, a.ppo_mini_batch_size, a.ppo_epochs) == (512, 16, 32, 1)
    assert (a.optim.lr, a.optim.lr_warmup_steps, a.optim.weight_decay, a.optim.clip_grad) == (1e-6, 10, 0.1, 1.0)
    assert (r.temperature, r.top_p, r.top_k) == (1.0, 1.0, -1)
    assert (r.tensor_model_parallel_size, a.fsdp_config.ulysses_sequence_parallel_size) == (4, 8)
    assert a.fsdp_config.param_offload and a.fsdp_config.optimizer_offload and a.use_dynamic_bsz
    v = r.val_kwargs
    assert (v.n, v.do_sample, v.temperature, v.top_p) == (32, True, 1.0, 0.7)
    assert str(data.val_files).endswith("/aime-2024-dedup.parquet")  # 30 problems × n=32 → best@32
    assert (t.nnodes, t.n_gpus_per_node, t.project_name, t.experiment_name) == (16, 8, "DAPO", DAPO[script])
    # verl's TransferQueue config asks for >= 2 storage units per node; its default 8 serves 4 nodes
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 2 * 16
    assert list(t.logger) == ["console", "wandb", "file"] and t.val_before_train and t.use_v1
    # the upstream run length: 1,791,700 DAPO-Math rows // gen batch 1536 (not 0.9.1's rows // 512 = 3499)
    assert (t.total_training_steps, t.total_epochs) == (1791700 // 1536, 1) == (1166, 1)
    (tool, _, _, argv) = calls[0]
    assert len(calls) == 1 and tool == "ray" and argv[:3] == ["job", "submit", "--address=http://localhost:8265"]
    assert "--no-wait" in argv and argv[argv.index("--") + 1 :][:3] == ["python3", "-m", "gtpo_verl.main"]


def test_dapo_knobs_follow_the_environment(stubs, tmp_path):
    script = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(
        stubs, tmp_path, script, "trainer.log_val_generations=4",
        NNODES=2, RAY_DATA_HOME="/shared", GTPO_ALPHA2=0.2, GTPO_ALPHA1=0.8, VAL_N=16, LAUNCHER="direct",
        TOTAL_TRAINING_STEPS=3,
    )
    assert proc.returncode == 0, proc.stderr
    ov = as_dict(launched_overrides(calls))
    assert calls[0][0] == "python3"  # LAUNCHER=direct
    assert ov["trainer.nnodes"] == "2" and ov["actor_rollout_ref.rollout.val_kwargs.n"] == "16"
    assert ov["algorithm.gtpo_token.alpha1"] == "0.8" and ov["algorithm.gtpo_token.alpha2"] == "0.2"
    assert ov["data.train_files"] == "/shared/data/dapo-math-17k.parquet"
    assert ov["trainer.total_training_steps"] == "3"
    assert ov["transfer_queue.backend.SimpleStorage.num_data_storage_units"] == "8"
    assert launched_overrides(calls)[-1] == "trainer.log_val_generations=4"  # extra Hydra overrides go last

    proc, _ = run_script(stubs, tmp_path, script, LAUNCHER="mpirun")
    assert proc.returncode == 2 and "LAUNCHER=ray" in proc.stderr


def test_paper_a_runs(launched):
    for script, (name, partner) in PAPER_A.items():
        overrides, cfg = launched[script][1], composed(launched, script)
        a, r, alg, data, t = (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.algorithm, cfg.data, cfg.trainer)
        assert t.experiment_name == name and t.project_name == "GTPO-trajectory"
        assert alg.adv_estimator == ("gtpo_traj" if name.startswith("GTPO") else "grpo")
        assert (r.n, data.train_batch_size, a.ppo_mini_batch_size, a.ppo_epochs) == (8, 1, 1, 1)  # one update per rollout
        assert (r.temperature, data.max_prompt_length, data.max_response_length) == (0.9, 4000, 1500)
        assert not (a.use_kl_loss or alg.use_kl_in_reward) and a.entropy_coeff == 0
        assert a.loss_agg_mode == "seq-mean-token-mean"
        assert (a.optim.lr_scheduler_type, a.optim.weight_decay, a.optim.clip_grad) == ("cosine", 0.1, 0.1)
        qwen = "QWEN3B" in name
        assert (a.optim.lr, a.optim.lr_warmup_steps_ratio) == ((2e-6, 0.01) if qwen else (1e-6, 0.005))
        assert cfg.actor_rollout_ref.model.path.endswith("Qwen2.5-3B-Instruct" if qwen else "Meta-Llama-3.1-8B-Instruct")
        assert str(data.train_files).endswith(("gsm8k_reasoning" if qwen else "math_reasoning") + "/train.parquet")
        assert cfg.reward.custom_reward_function.path == "pkg://gtpo_verl.rewards.format_math"
        assert (t.nnodes, t.n_gpus_per_node) == (1, 8) and launched[script][0][0][0] == "python3"  # LAUNCHER=direct
        assert t.total_training_steps == (7473 if qwen else 7500)  # one epoch of the train split at 1 prompt per step
        # GTPO and its GRPO baseline differ only in the algorithm block
        other = as_dict(launched[f"recipes/gtpo_traj/{partner}"][1])
        mine = as_dict(overrides)
        differing = {k for k in set(mine) | set(other) if mine.get(k) != other.get(k)}
        assert all(re.match(r"^(algorithm\.|trainer\.experiment_name$|trainer\.default_local_dir$)", k) for k in differing), differing
