"""Every caller's method overrides, recorded literally: the CPU demo's runs, the real-LM demo's runs, the
real-LM study's arms, the device check's methods and the lab's method rows. Whatever defines the methods,
each caller must still get exactly these. Override lists compare as sets of distinct keys: plain
``key=value`` overrides of distinct keys compose to the same config in any order."""


import torch

from support.demo_modules import demo_module
from support.paths import REPO_ROOT

DEMO = str(REPO_ROOT / "examples" / "cpu_demo")

DAPO_RECIPE = ['actor_rollout_ref.actor.clip_ratio_low=0.2', 'actor_rollout_ref.actor.clip_ratio_high=0.28',
               'actor_rollout_ref.actor.clip_ratio_c=10.0', 'algorithm.filter_groups.enable=true',
               'algorithm.filter_groups.metric=acc', 'algorithm.use_kl_in_reward=false',
               'actor_rollout_ref.actor.use_kl_loss=false']
NO_KL = ['algorithm.use_kl_in_reward=false', 'actor_rollout_ref.actor.use_kl_loss=false']
LM_SCORER = ['reward.custom_reward_function.path={HERE}/arithmetic_task.py',
             'reward.custom_reward_function.name=compute_score']

CPU_DEMO_RUNS = {
    'DAPO': [*DAPO_RECIPE, 'algorithm.adv_estimator=grpo', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', 'reward.custom_reward_function.path={HERE}/task.py', 'reward.custom_reward_function.name=compute_score'],
    'DAPO_TOKEN': [*DAPO_RECIPE, 'algorithm.adv_estimator=gtpo_token', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', 'reward.custom_reward_function.path={HERE}/task.py', 'reward.custom_reward_function.name=compute_score'],
    'DAPO_SEQ': [*DAPO_RECIPE, 'algorithm.adv_estimator=grpo_s', 'actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', 'reward.custom_reward_function.path={HERE}/task.py', 'reward.custom_reward_function.name=compute_score'],
    'GTPO_TRAJ': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'algorithm.gtpo_traj.preset=paper', 'reward.custom_reward_function.path={HERE}/task.py', 'reward.custom_reward_function.name=compute_score_paper_a'],
}

CPU_DEMO_DAPO = [*DAPO_RECIPE, 'reward.custom_reward_function.path={HERE}/task.py', 'reward.custom_reward_function.name=compute_score']

LM_DEMO_RUNS = {
    'DAPO': [*DAPO_RECIPE, 'algorithm.adv_estimator=grpo', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', *LM_SCORER],
    'DAPO_TOKEN': [*DAPO_RECIPE, 'algorithm.adv_estimator=gtpo_token', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', *LM_SCORER],
    'DAPO_SEQ': [*DAPO_RECIPE, 'algorithm.adv_estimator=grpo_s', 'actor_rollout_ref.actor.policy_loss.loss_mode=grpo_s', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *LM_SCORER],
    'GTPO_TRAJ': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'algorithm.gtpo_traj.preset=official', *LM_SCORER],
    'GTPO_TRAJ_SCALED': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'algorithm.gtpo_traj.preset=official', 'algorithm.gtpo_traj.entropy_threshold_ratio=1.5', *LM_SCORER],
}

STUDY_ARMS = {
    'DAPO': [*DAPO_RECIPE, 'algorithm.adv_estimator=grpo', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', *LM_SCORER],
    'DAPO_TOKEN': [*DAPO_RECIPE, 'algorithm.adv_estimator=gtpo_token', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', *LM_SCORER],
    'DAPO_TOKEN_NO_ENTROPY': [*DAPO_RECIPE, 'algorithm.adv_estimator=gtpo_token', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', 'reward.custom_reward_function.path={HERE}/arithmetic_task.py', 'reward.custom_reward_function.name=compute_score', 'algorithm.gtpo_token.alpha2=0'],
    'DAPO_TOKEN_ROW': [*DAPO_RECIPE, 'algorithm.adv_estimator=gtpo_token', 'actor_rollout_ref.actor.loss_agg_mode=token-mean', 'reward.custom_reward_function.path={HERE}/arithmetic_task.py', 'reward.custom_reward_function.name=compute_score', 'algorithm.gtpo_token.entropy_share=geometric'],
    'GTPO_TRAJ_PAPER': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'reward.custom_reward_function.path={HERE}/arithmetic_task.py', 'reward.custom_reward_function.name=compute_score', 'algorithm.gtpo_traj.preset=paper'],
    'GTPO_TRAJ_RATIO': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'reward.custom_reward_function.path={HERE}/arithmetic_task.py', 'reward.custom_reward_function.name=compute_score', 'algorithm.gtpo_traj.preset=official', 'algorithm.gtpo_traj.entropy_threshold_ratio=1.5'],
    'GTPO_TRAJ_RATIO_NO_REG': ['algorithm.adv_estimator=gtpo_traj', 'actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean', *NO_KL, 'reward.custom_reward_function.path={HERE}/arithmetic_task.py', 'reward.custom_reward_function.name=compute_score', 'algorithm.gtpo_traj.preset=official', 'algorithm.gtpo_traj.entropy_threshold_ratio=1.5', 'algorithm.gtpo_traj.gamma=0'],
}

# the device check's composed config: (adv_estimator, loss_mode, loss_agg_mode, clip low, high, c,
# filter_groups.enable, use_kl_in_reward, use_kl_loss)
DEVICE_CHECK_CONFIG = {
    "DAPO": ("grpo", "vanilla", "token-mean", 0.2, 0.28, 10.0, False, False, False),
    "DAPO_TOKEN": ("gtpo_token", "vanilla", "token-mean", 0.2, 0.28, 10.0, False, False, False),
    "DAPO_SEQ": ("grpo_s", "grpo_s", "seq-mean-token-mean", 0.2, 0.28, 10.0, False, False, False),
}

LAB_FIELDS = ('name', 'estimator', 'transforms', 'loss_mode', 'loss_agg_mode', 'clip_ratio_low', 'clip_ratio_high', 'clip_ratio_c',
 'dynamic_sampling', 'mini_batches', 'ppo_epochs', 'reward', 'norm_adv_by_std_in_grpo', 'algorithm', 'policy_loss',
 'sampler_stream')
LAB_METHODS = [
    ('DAPO', 'grpo', (), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 0),
    ('DAPO_TWIN', 'grpo', (), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 1),
    ('DAPO_TOKEN', 'gtpo_token', (), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 0),
    ('DAPO_TOKEN_A05', 'gtpo_token', (), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {'gtpo_token': {'alpha1': 0.5, 'alpha2': 0.5}}, {}, 0),
    ('DAPO_TOKEN_ROW', 'gtpo_token', (), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {'gtpo_token': {'entropy_share': 'geometric'}}, {}, 0),
    ('DAPO_SEQ', 'grpo_s', (), 'grpo_s', 'seq-mean-token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 0),
    ('DAPO_HIGH_ENTROPY', 'grpo', ({'name': 'high_entropy_tokens', 'rho': 0.2},), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 0),
    ('DAPO_ENTROPY_ADV', 'grpo', ({'name': 'entropy_advantage'},), 'vanilla', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {}, 0),
    ('CLIP_COV', 'grpo', (), 'clip_cov', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {'clip_cov_ratio': 0.02}, 0),
    ('KL_COV', 'grpo', (), 'kl_cov', 'token-mean', 0.2, 0.28, 10.0, True, 2, 1, 'acc', True, {}, {'kl_cov_ratio': 0.02}, 0),
    ('GRPO', 'grpo', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {}, {}, 0),
    ('GRPO_TWIN', 'grpo', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {}, {}, 1),
    ('GTPO_TRAJ', 'gtpo_traj', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {'gtpo_traj': {'preset': 'official'}}, {}, 0),
    ('GTPO_TRAJ_PAPER', 'gtpo_traj', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {'gtpo_traj': {'preset': 'paper'}}, {}, 0),
    ('GTPO_TRAJ_D08', 'gtpo_traj', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {'gtpo_traj': {'preset': 'official', 'entropy_threshold_ratio': 0.8}}, {}, 0),
    ('GTPO_TRAJ_D10', 'gtpo_traj', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {'gtpo_traj': {'preset': 'official', 'entropy_threshold_ratio': 1.0}}, {}, 0),
    ('GTPO_TRAJ_D12', 'gtpo_traj', (), 'vanilla', 'seq-mean-token-mean', 0.2, 0.2, 10.0, False, 1, 1, 'paper_a', True, {'gtpo_traj': {'preset': 'official', 'entropy_threshold_ratio': 1.2}}, {}, 0),
]



def assert_same_overrides(got, expected):
    expected = [o.replace("{HERE}", DEMO) for o in expected]
    assert sorted(got) == sorted(expected)
    keys = [o.split("=", 1)[0] for o in got]
    assert len(set(keys)) == len(keys), keys  # distinct keys: the order cannot matter
    assert not [k for k in keys if k.startswith(("+", "~"))]


def assert_same_runs(got, expected):
    assert list(got) == list(expected)
    for name in expected:
        assert_same_overrides(list(got[name]), expected[name])


def test_cpu_demo_runs():
    run_demo = demo_module("run_demo")
    assert_same_runs(run_demo.RUNS, CPU_DEMO_RUNS)
    assert_same_overrides(run_demo.DAPO, CPU_DEMO_DAPO)


def test_lm_demo_runs():
    assert_same_runs(demo_module("run_lm_demo").RUNS, LM_DEMO_RUNS)


def test_study_arms():
    arms = demo_module("lm_study").ARMS
    assert_same_runs({name: arm.knobs for name, arm in arms.items()}, STUDY_ARMS)
    assert {name: arm.audited for name, arm in arms.items()} == {name: name != "DAPO" for name in STUDY_ARMS}


def test_device_check_methods():
    device_check = demo_module("benchmarks.check_actor_device", str(REPO_ROOT))
    SETTINGS, STEPS, compose = device_check.SETTINGS, device_check.STEPS, device_check.compose
    for method, expected in DEVICE_CHECK_CONFIG.items():
        config = compose(torch.device("cpu"), next(iter(SETTINGS)), method, "/no/model", STEPS["cpu"])
        actor, algorithm = config.actor_rollout_ref.actor, config.algorithm
        assert (algorithm.adv_estimator, actor.policy_loss.loss_mode, actor.loss_agg_mode, actor.clip_ratio_low,
                actor.clip_ratio_high, actor.clip_ratio_c, algorithm.filter_groups.enable, algorithm.use_kl_in_reward,
                actor.use_kl_loss) == expected, method


def test_lab_methods():
    from gtpo_verl.lab.methods import METHODS, Method

    assert list(METHODS) == [row[0] for row in LAB_METHODS]
    for row in LAB_METHODS:
        expected = Method(**dict(zip(LAB_FIELDS, row)))
        assert METHODS[row[0]] == expected
        for field in LAB_FIELDS:  # field by field, with its type (0.2 is not "0.2", True is not 1)
            got, want = getattr(METHODS[row[0]], field), getattr(expected, field)
            assert (type(got), got) == (type(want), want), (row[0], field)
