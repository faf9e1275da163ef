"""The values each string switch accepts, in one place (docs/spec.md names the formulas).

Pure Python, no imports: the algorithms, the config blocks and the docs test all read these.
"""

# ---- Paper B, GTPO (token level): algorithm.gtpo_token
TOKEN_VARIANTS = ("base", "clipped_len", "unified_v6")
ENTROPY_SHARES = ("column", "geometric")  # share across the group at step t | within the row
LENGTH_DENOMINATORS = ("l1", "l2")  # R(i) of (S23) divided by L1 (continuous) | L2 (as printed)

# ---- Paper B, GRPO-S (sequence level): algorithm.grpo_s
SEQUENCE_VARIANTS = ("base", "unified_v6")
NEGATIVE_SHARES = ("arithmetic", "geometric")  # failure share over the mean | geometric mean of 1/Ĥ
SUCCESS_SHARES = ("arithmetic", "geometric")  # success share over the mean | geometric mean of Ĥ
SEQUENCE_ENTROPY_MEANS = ("arithmetic", "geometric")  # Ĥ_i as the mean | geometric mean of H_{i,t}
RATIO_MEANS = ("arithmetic", "geometric")  # ŵ_i of the grpo_s loss: mean of ratios | GSPO

# ---- Paper B, both estimators
ADV_NORM_MODES = ("two_zero_filled", "single_combined", "per_class")
UNIFORM_GROUP_MODES = ("keep", "zero_adv")  # all-success / all-failure groups

# ---- Paper A, GTPO (trajectory): algorithm.gtpo_traj
TRAJ_PRESET_NAMES = ("official", "paper")
OVERLAP_MODES = ("product", "union")
DIVISOR_MODES = ("code", "union", "none")
ENTROPY_REG_MODES = ("advantage_offset", "differentiable")
# where δ applies: every response, only A < 0 (the "OnlyNeg" ablation), or "none" (the filter off), one
# vocabulary from the config to gtpo_traj_advantage
ENTROPY_FILTER_SCOPES = ("all", "neg_only", "none")

# ---- advantage transforms: algorithm.adv_transforms
# high_entropy_tokens' token-mean denominator: every valid token (the paper's objective) | kept tokens (its code)
HIGH_ENTROPY_NORMALIZATIONS = ("valid", "kept")
