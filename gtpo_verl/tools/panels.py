"""The panels of docs/metrics.md as data: what ``gtpo-dashboard`` (a wandb workspace) and
``gtpo-report`` (an offline HTML page) both draw.

One line plot per panel, x-axis the training step, the selected runs overlaid. ``{src}`` is the
validation data source, ``{n}`` the validation samples per problem
(``actor_rollout_ref.rollout.val_kwargs.n``), ``{half}`` the largest power of two below it
(verl's best@N grid), ``{k}`` every k of ``pass_ks(n)``. Validation shows verl's bootstrap
``best@N`` (what the papers plotted) next to the unbiased ``val-gtpo/.../pass@k`` the trainer
mixin adds.
"""

from __future__ import annotations

from gtpo_verl.algorithms.pass_at_k import pass_ks

VALIDATION_SECTION = "validation ({src}, n = {n})"
HEALTH_SECTION = "algorithm health"

# (section, [(panel title, [metric templates])]); docs/metrics.md explains each panel
SECTIONS: list[tuple[str, list[tuple[str, list[str]]]]] = [
    (VALIDATION_SECTION, [
        ("mean@{n} (avg@{n})", ["val-core/{src}/acc/mean@{n}"]),
        ("pass@{n}: unbiased vs verl's bootstrap best@{n}", ["val-gtpo/{src}/pass@{n}", "val-core/{src}/acc/best@{n}/mean"]),
        ("unbiased pass@k", ["val-gtpo/{src}/pass@{k}"]),
        ("maj@{n}: full vote vs verl's bootstrap", ["val-gtpo/{src}/maj@{n}", "val-core/{src}/acc/maj@{n}/mean"]),
        ("reward best@{n} (Paper B's panel)", ["val-aux/{src}/reward/best@{n}/mean"]),
        ("reward best@{half}", ["val-aux/{src}/reward/best@{half}/mean"]),
    ]),
    ("training signal", [
        ("training score", ["critic/score/mean"]),
        ("groups filtered (dynamic sampling)", ["training/filter_groups/evicted_samples"]),
        ("response length", ["response_length/mean"]),
        ("responses cut at max length", ["response_length/clip_ratio"]),
    ]),
    ("entropy", [
        ("policy entropy (each run's loss_agg_mode)", ["actor/entropy"]),
        ("token-mean old-policy entropy, its baseline (EMA) and floor", ["gtpo/entropy/batch_mean", "gtpo/entropy/baseline",
                                                                          "gtpo/entropy/floor"]),
        ("entropy watch: steps in a row above ratio × floor", ["gtpo/entropy/rise_steps"]),
        ("entropy watch: rise ratio", ["gtpo/entropy/rise_ratio"]),
        ("entropy watch: warned this step (1 = yes)", ["gtpo/entropy/collapse_warning", "gtpo/entropy/fall_warning"]),
        ("entropy watch: warnings", ["gtpo/entropy/warnings_total"]),
    ]),
    (HEALTH_SECTION, [
        ("a term does nothing (1 = past its threshold)", ["gtpo/health/delta_filtered", "gtpo/health/bonus_clipped",
                                                          "gtpo/health/all_equal_groups"]),
        ("groups with one reward for all responses", ["gtpo/health/all_equal_groups_frac"]),
        ("advantage moved by the entropy (vs the method without it)", ["gtpo/health/entropy_moved_frac"]),
        ("success tokens alone in their column (GTPO, column share)", ["gtpo/health/alone_in_column_frac"]),
        ("zero advantages in mixed groups; δ-kept responses; conflict tokens",
         ["gtpo/health/zero_advantage_frac", "gtpo/health/delta_kept_frac", "gtpo/health/conflict_token_frac"]),
        ("no-op guard: steps in a row that trained nothing", ["gtpo/health/noop_steps"]),
    ]),
    ("shaping", [
        ("advantage by outcome", ["gtpo/adv/success/mean", "gtpo/adv/failure/mean"]),
        ("advantage spread by outcome (std)", ["gtpo/adv/success/std", "gtpo/adv/failure/std"]),
        ("advantage range by outcome", ["gtpo/adv/success/min", "gtpo/adv/success/max",
                                        "gtpo/adv/failure/min", "gtpo/adv/failure/max"]),
        ("valid tokens by outcome", ["gtpo/adv/success/tokens", "gtpo/adv/failure/tokens"]),
        ("bonus concentration (GTPO, GRPO-S)", ["gtpo/bonus_share/mean", "gtpo/bonus_share/std", "gtpo/bonus_share/max"]),
        ("entropy by outcome", ["gtpo/entropy/success_mean", "gtpo/entropy/failure_mean"]),
        ("success fraction", ["gtpo/success_frac"]),
    ]),
    ("GTPO-trajectory (Paper A)", [
        ("conflict token fraction", ["gtpo/conflict/pos_token_frac", "gtpo/conflict/neg_token_frac"]),
        ("conflict tokens boosted / zeroed", ["gtpo/conflict/boosted_tokens", "gtpo/conflict/zeroed_tokens"]),
        ("conflict divisor n_conf (mean)", ["gtpo/conflict/mean_divisor"]),
        ("entropy filter: responses dropped", ["gtpo/delta/filtered_frac"]),
        ("initial entropy ⟨H⟩_ini (paper preset)", ["gtpo/entropy/initial"]),
    ]),
    ("advantage transforms (entropy-aware baselines)", [
        ("high-entropy tokens: kept fraction", ["gtpo/transform/high_entropy_tokens/kept_fraction"]),
        ("high-entropy tokens: entropy threshold τ", ["gtpo/transform/high_entropy_tokens/entropy_threshold"]),
        ("entropy advantage: bonus mean", ["gtpo/transform/entropy_advantage/bonus_mean"]),
        ("entropy advantage: tokens at the cap", ["gtpo/transform/entropy_advantage/clipped_fraction"]),
    ]),
    ("optimisation", [
        ("clipping", ["actor/pg_clipfrac", "actor/pg_clipfrac_lower"]),
        ("sequence ratio (GRPO-S)", ["actor/seq_ratio_mean"]),
        ("KL to the rollout policy", ["actor/ppo_kl"]),
        ("gradient norm", ["actor/grad_norm"]),
        ("learning rate", ["actor/lr"]),
    ]),
    ("system", [
        ("step time", ["timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor"]),
        ("peak memory (GPU)", ["perf/max_memory_allocated_gb"]),
        ("throughput", ["perf/throughput"]),
        ("padding rows (data-parallel fill)", ["gtpo/batch/padding_rows"]),
    ]),
]
# wandb's own step, which verl sets to the global step on every log call (``training/global_step``
# is missing from the validation before training, so step-0 pass@k would not be drawn)
X_AXIS = "Step"
# Metrics a CPU run cannot log, with the reason (the dashboard test checks every other metric
# against a real CPU run's metrics file)
NOT_ON_CPU = {
    "training/filter_groups/evicted_samples": "DAPO dynamic sampling (algorithm.filter_groups), off on CPU",
    "perf/max_memory_allocated_gb": "accelerator memory",
    "gtpo/entropy/initial": "GTPO-trajectory with the paper preset's ⟨H⟩_ini gate",
}


def largest_power_of_two_below(n: int) -> int:
    half = 1
    while half * 2 < n:
        half *= 2
    return half


def panel_metrics(data_source: str, val_n: int) -> list[tuple[str, str, list[str]]]:
    """``(section, title, metrics)`` for every panel, templates filled in."""
    if val_n < 2:
        raise ValueError(f"--val-n must be >= 2 (validation samples per problem), got {val_n}")
    fill = {"src": data_source, "n": val_n, "half": largest_power_of_two_below(val_n)}
    panels = []
    for section, entries in SECTIONS:
        for title, templates in entries:
            metrics = []
            for template in templates:
                ks = pass_ks(val_n) if "{k}" in template else [None]
                metrics += [template.format(k=k, **fill) for k in ks]
            panels.append((section.format(**fill), title.format(**fill), metrics))
    return panels


def training_panels() -> list[tuple[str, str, list[str]]]:
    """``(section, title, metrics)`` of every panel that does not depend on the validation set."""
    return [(section, title, list(templates)) for section, entries in SECTIONS if section != VALIDATION_SECTION
            for title, templates in entries]
