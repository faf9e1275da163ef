"""A catalogue of bad configs, written down from docs/config.md, not read from the code under test.

Each entry is ``(overrides, key)``: Hydra overrides on top of ``BASE`` (the CPU preset with groups of
4) and the full key the one error must name. ``KEYS`` lists every key of gtpo_verl's blocks with the
kind of value docs/config.md gives it; the bad values of each kind come from ``BAD_VALUES``. A test
holds ``KEYS`` to the blocks' fields, so a new field cannot go unlisted.
"""

from __future__ import annotations

BASE = (
    "algorithm.adv_estimator=grpo",  # verl's grpo: a valid config, on which each case's override is the one fault
    "actor_rollout_ref.rollout.n=4",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
)

# Hydra override values (as typed on a command line) that each kind of key must refuse
_NUMBER = ["abc", "'0.5'", "nan", "inf", "-inf", "true", "1h", "[1]"]
BAD_VALUES = {
    "bool": ["'false'", "'true'", "yes", "no", "1", "0", "off", "'0'", "[true]"],
    "bool_or_null": ["'false'", "yes", "1", "0", "off"],
    "weight": [*_NUMBER, "-0.1", "1e308", "-1e308", "null"],  # >= 0, bounded (overflow), not null
    "number": [*_NUMBER, "null"],  # any finite number, not null
    "positive_or_null": [*_NUMBER, "0", "-1"],  # > 0 or null
    "nonneg_or_null": [*_NUMBER, "-0.5"],
    "epsilon": [*_NUMBER, "0", "-1e-6", "2", "null"],  # (0, 1]
    "int_or_null": ["4096.7", "abc", "true", "'7'", "0", "-3", "nan"],
    "ratio_above_one": [*_NUMBER, "1", "0.5", "-2", "null"],
    "ratio_above_one_or_null": [*_NUMBER, "1", "0.9"],
    "momentum": [*_NUMBER, "1", "1.5", "-0.1", "null"],
    "count": ["abc", "2.5", "-1", "true", "'3'", "null"],
    "positive_count": ["abc", "2.5", "0", "-1", "true", "'3'", "null"],
    "seconds_or_null": [*_NUMBER, "-5", "-0.1"],
    "ratio_or_null": [*_NUMBER, "0", "-1", "101"],  # (0, 100] or null
    "choice": ["nope", "1", "true", "''", "[base]"],
    "choice_or_null": ["nope", "1", "true", "''"],
    "steps": ["abc", "[0]", "[-1]", "[2.5]", "[true]", "['2']", "[a]"],
}

KEYS = {
    # algorithm.gtpo_token (docs/config.md)
    "algorithm.gtpo_token.alpha1": "weight",
    "algorithm.gtpo_token.alpha2": "weight",
    "algorithm.gtpo_token.variant": "choice",
    "algorithm.gtpo_token.negative_shaping": "bool",
    "algorithm.gtpo_token.entropy_share": "choice",
    "algorithm.gtpo_token.adv_norm": "choice",
    "algorithm.gtpo_token.success_threshold": "number",
    "algorithm.gtpo_token.kappa": "ratio_above_one_or_null",
    "algorithm.gtpo_token.overlong_buffer_len": "int_or_null",
    "algorithm.gtpo_token.max_response_len": "int_or_null",
    "algorithm.gtpo_token.length_penalty_denominator": "choice",
    "algorithm.gtpo_token.uniform_outcome_groups": "choice",
    "algorithm.gtpo_token.std_unbiased": "bool",
    "algorithm.gtpo_token.epsilon": "epsilon",
    # algorithm.grpo_s
    "algorithm.grpo_s.beta1": "weight",
    "algorithm.grpo_s.beta2": "weight",
    "algorithm.grpo_s.variant": "choice",
    "algorithm.grpo_s.negative_shaping": "bool",
    "algorithm.grpo_s.negative_share": "choice",
    "algorithm.grpo_s.success_share": "choice",
    "algorithm.grpo_s.sequence_entropy": "choice",
    "algorithm.grpo_s.adv_norm": "choice",
    "algorithm.grpo_s.success_threshold": "number",
    "algorithm.grpo_s.uniform_outcome_groups": "choice",
    "algorithm.grpo_s.std_unbiased": "bool",
    "algorithm.grpo_s.epsilon": "epsilon",
    # algorithm.gtpo_traj
    "algorithm.gtpo_traj.preset": "choice",
    "algorithm.gtpo_traj.gamma": "weight",
    "algorithm.gtpo_traj.conflict_weight": "weight",
    "algorithm.gtpo_traj.entropy_filter_scope": "choice",
    "algorithm.gtpo_traj.entropy_reg_mode": "choice",
    "algorithm.gtpo_traj.initial_entropy": "nonneg_or_null",
    "algorithm.gtpo_traj.entropy_threshold": "positive_or_null",
    "algorithm.gtpo_traj.entropy_threshold_ratio": "ratio_or_null",
    "algorithm.gtpo_traj.overlap": "choice_or_null",
    "algorithm.gtpo_traj.divisor": "choice_or_null",
    "algorithm.gtpo_traj.norm_adv_by_std": "bool_or_null",
    "algorithm.gtpo_traj.ini_entropy_gate": "bool_or_null",
    "algorithm.gtpo_traj.epsilon": "epsilon",
    # gtpo
    "gtpo.preflight": "bool",
    "gtpo.dry_run": "bool",
    "gtpo.probe": "bool",
    "gtpo.diagnostics": "bool",
    "gtpo.remeasure_on_resume": "bool",
    "gtpo.entropy_warning.ratio": "ratio_above_one",
    "gtpo.entropy_warning.fall_ratio": "ratio_above_one_or_null",
    "gtpo.entropy_warning.momentum": "momentum",
    "gtpo.entropy_warning.warmup_steps": "count",
    "gtpo.entropy_warning.persist_steps": "positive_count",
    "gtpo.watchdog.generation_timeout_s": "seconds_or_null",
    "gtpo.health.on_noop": "choice",
    "gtpo.health.window": "positive_count",
    "gtpo.health.noop_share": "epsilon",  # a share in (0, 1]
    "gtpo.validation_metrics.enable": "bool",
    "gtpo.validation_metrics.success_threshold": "number",
    "gtpo.audit.steps": "steps",
    "gtpo.audit.dir": None,  # a path: any string or null (the preflight checks the folder)
    "gtpo.audit.require_weights": "bool",
    # the grpo_s loss's own knob
    "actor_rollout_ref.actor.policy_loss.sequence_ratio_mean": "choice",
}

# Whole blocks set to a scalar, unknown keys, and settings that only fail together
STRUCTURAL = [
    (("algorithm.gtpo_token=0.1",), "algorithm.gtpo_token"),
    (("algorithm.grpo_s=abc",), "algorithm.grpo_s"),
    (("algorithm.gtpo_traj=[1]",), "algorithm.gtpo_traj"),
    (("gtpo.audit=0.1",), "gtpo.audit"),
    (("gtpo.watchdog=true",), "gtpo.watchdog"),
    (("+algorithm.gtpo_token.alpha3=0.1",), "algorithm.gtpo_token.alpha3"),
    (("+algorithm.gtpo_traj.Gamma=0.1",), "algorithm.gtpo_traj.Gamma"),
    (("+gtpo.diagnostic=false",), "gtpo.diagnostic"),
    (("+gtpo.watchdog.timeout_s=60",), "gtpo.watchdog.timeout_s"),
    (("algorithm.gtpo_token.alpha1=0", "algorithm.gtpo_token.alpha2=0"), "algorithm.gtpo_token.alpha1"),
    (("algorithm.grpo_s.beta1=0", "algorithm.grpo_s.beta2=0"), "algorithm.grpo_s.beta1"),
    (("algorithm.gtpo_token.variant=unified_v6",), "algorithm.gtpo_token.variant"),
    (("algorithm.grpo_s.variant=unified_v6",), "algorithm.grpo_s.variant"),
    (("algorithm.gtpo_token.variant=clipped_len",), "algorithm.gtpo_token.kappa"),
    (("algorithm.gtpo_token.variant=clipped_len", "algorithm.gtpo_token.kappa=3"), "algorithm.gtpo_token.overlong_buffer_len"),
    (("algorithm.gtpo_token.variant=clipped_len", "algorithm.gtpo_token.kappa=3", "algorithm.gtpo_token.overlong_buffer_len=4096",
      "algorithm.gtpo_token.max_response_len=1024"), "algorithm.gtpo_token.overlong_buffer_len"),
    (("algorithm.gtpo_token.variant=clipped_len", "algorithm.gtpo_token.kappa=20", "algorithm.gtpo_token.overlong_buffer_len=4",
      "algorithm.gtpo_token.max_response_len=10"), "algorithm.gtpo_token.kappa"),
    (("algorithm.gtpo_token.variant=clipped_len", "algorithm.gtpo_token.alpha1=1.0", "algorithm.gtpo_token.kappa=3",
      "algorithm.gtpo_token.overlong_buffer_len=4", "algorithm.gtpo_token.max_response_len=10"), "algorithm.gtpo_token.alpha1"),
    (("gtpo.audit.steps=[2]",), "gtpo.audit.dir"),
    (("gtpo.audit.steps=[1]", "gtpo.audit.dir=/tmp/audit", "algorithm.adv_estimator=grpo"), "gtpo.audit.steps"),
    (("gtpo.audit.steps=[3]", "gtpo.audit.dir=/tmp/audit", "algorithm.adv_estimator=gtpo_token"), "gtpo.audit.steps"),
    # estimator / loss names, and the batch shape the group estimators need
    (("algorithm.adv_estimator=gtpo_tokn",), "algorithm.adv_estimator"),
    (("algorithm.adv_estimator=GTPO_TOKEN",), "algorithm.adv_estimator"),
    (("algorithm.adv_estimator=gtpo",), "algorithm.adv_estimator"),
    (("algorithm.adv_estimator=''",), "algorithm.adv_estimator"),
    (("actor_rollout_ref.actor.policy_loss.loss_mode=grpo-s",), "actor_rollout_ref.actor.policy_loss.loss_mode"),
    (("actor_rollout_ref.actor.policy_loss.loss_mode=nope",), "actor_rollout_ref.actor.policy_loss.loss_mode"),
    (("algorithm.adv_estimator=gtpo_token", "actor_rollout_ref.rollout.n=1"), "actor_rollout_ref.rollout.n"),
    (("algorithm.adv_estimator=grpo_s", "actor_rollout_ref.rollout.n=1"), "actor_rollout_ref.rollout.n"),
    (("algorithm.adv_estimator=gtpo_traj", "actor_rollout_ref.rollout.n=1"), "actor_rollout_ref.rollout.n"),
    (("algorithm.adv_estimator=gae",), "critic.model.path"),  # verl's default critic path: no such folder here
    (("algorithm.adv_estimator=grpo", "critic.enable=true", "critic.model.path=./no_critic"), "critic.model.path"),
    (("actor_rollout_ref.rollout.n=0",), "actor_rollout_ref.rollout.n"),
    (("actor_rollout_ref.rollout.n=abc",), "actor_rollout_ref.rollout.n"),
    (("data.train_batch_size=0",), "data.train_batch_size"),
    (("data.train_batch_size=-4",), "data.train_batch_size"),
    (("data.train_batch_size=abc",), "data.train_batch_size"),
    (("data.train_batch_size=2.5",), "data.train_batch_size"),
    (("trainer.use_v1=false",), "trainer.use_v1"),
    (("trainer.use_v1='true'",), "trainer.use_v1"),
    (("algorithm.adv_estimator=gtpo_token", "algorithm.rollout_correction.bypass_mode=true"),
     "algorithm.rollout_correction.bypass_mode"),
    # verl's own keys: typed by its dataclasses (checked against their annotations) or read by the package
    (("actor_rollout_ref.actor.clip_ratio_high=abc",), "actor_rollout_ref.actor.clip_ratio_high"),
    (("actor_rollout_ref.actor.optim.lr='1e-6'",), "actor_rollout_ref.actor.optim.lr"),
    (("actor_rollout_ref.actor.entropy_coeff=abc",), "actor_rollout_ref.actor.entropy_coeff"),
    (("actor_rollout_ref.actor.loss_agg_mode=token_mean",), "actor_rollout_ref.actor.loss_agg_mode"),
    (("actor_rollout_ref.actor.ppo_epochs=0",), "actor_rollout_ref.actor.ppo_epochs"),
    (("actor_rollout_ref.rollout.temperature=0",), "actor_rollout_ref.rollout.temperature"),
    (("actor_rollout_ref.rollout.temperature=-1",), "actor_rollout_ref.rollout.temperature"),
    (("actor_rollout_ref.rollout.n=2.5",), "actor_rollout_ref.rollout.n"),
    (("actor_rollout_ref.rollout.val_kwargs.n=0",), "actor_rollout_ref.rollout.val_kwargs.n"),
    (("algorithm.filter_groups.enable='true'",), "algorithm.filter_groups.enable"),
    (("algorithm.norm_adv_by_std_in_grpo='false'",), "algorithm.norm_adv_by_std_in_grpo"),
    (("algorithm.use_kl_in_reward=no",), "algorithm.use_kl_in_reward"),
    (("algorithm.gamma=abc",), "algorithm.gamma"),
    (("trainer.total_training_steps=abc",), "trainer.total_training_steps"),
    (("trainer.total_training_steps=-5",), "trainer.total_training_steps"),
    (("trainer.total_epochs=0",), "trainer.total_epochs"),
    (("trainer.save_freq=abc",), "trainer.save_freq"),
    (("trainer.resume_mode=sometimes",), "trainer.resume_mode"),
    (("trainer.logger=[consol]",), "trainer.logger"),
    (("trainer.logger=[console,wandbb]",), "trainer.logger"),
    (("data.max_response_length=0",), "data.max_response_length"),
    (("data.max_prompt_length=abc",), "data.max_prompt_length"),
    # advantage transforms
    (("algorithm.adv_transforms=[{name:high_entropy_token}]",), "algorithm.adv_transforms[0].name"),
    (("algorithm.adv_transforms=[{rho:0.2}]",), "algorithm.adv_transforms[0]"),
    (("algorithm.adv_transforms=high_entropy_tokens",), "algorithm.adv_transforms"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,rho:0}]",), "algorithm.adv_transforms[0].rho"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,rho:1.5}]",), "algorithm.adv_transforms[0].rho"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,rho:'0.2'}]",), "algorithm.adv_transforms[0].rho"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,rho:nan}]",), "algorithm.adv_transforms[0].rho"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,normalize_over:all}]",), "algorithm.adv_transforms[0].normalize_over"),
    (("algorithm.adv_transforms=[{name:high_entropy_tokens,top:0.2}]",), "algorithm.adv_transforms[0].top"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,kappa:1}]",), "algorithm.adv_transforms[0].kappa"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,kappa:0.5}]",), "algorithm.adv_transforms[0].kappa"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,kappa:abc}]",), "algorithm.adv_transforms[0].kappa"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,alpha:-0.4}]",), "algorithm.adv_transforms[0].alpha"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,alpha:1e308}]",), "algorithm.adv_transforms[0].alpha"),
    (("algorithm.adv_transforms=[{name:entropy_advantage,alpha:true}]",), "algorithm.adv_transforms[0].alpha"),
    (("algorithm.adv_transforms=[{name:entropy_advantage},{name:nope}]",), "algorithm.adv_transforms[1].name"),
]


def field_cases() -> list[tuple[tuple[str, ...], str]]:
    """One case per (key, bad value of its kind)."""
    cases = []
    for key, kind in KEYS.items():
        for value in BAD_VALUES.get(kind, []) if kind else []:
            cases.append(((f"{key}={value}",), key))
    return cases


def all_cases() -> list[tuple[tuple[str, ...], str]]:
    return field_cases() + STRUCTURAL
