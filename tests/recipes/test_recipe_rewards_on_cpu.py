"""The recipes' reward and validation wiring through verl's own code: the reward manager each composed
config builds scores a response as the paper's setup says, and verl's V1 validation names the metrics
docs/metrics.md uses.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from support.recipes import DAPO, PAPER_A, composed

# verl warns that GRPO-style estimators run without a critic: expected for every recipe here
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")


class _Tokenizer:
    """Decodes every response to a fixed text (the reward managers only call ``decode``)."""

    def __init__(self, text):
        self.text = text

    def decode(self, ids, skip_special_tokens=True):
        return self.text


def _score_one(cfg, data_source, ground_truth, response_text, response_len):
    """Build verl's reward manager from ``cfg`` as its reward-loop workers do, and score one response."""
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    prompt_len = 3
    data = DataProto.from_dict(
        tensors={
            "responses": torch.ones(1, response_len, dtype=torch.long),
            "attention_mask": torch.ones(1, prompt_len + response_len, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )

    def score():  # in a fresh thread: verl's get_event_loop() then makes a loop for that thread only
        manager = load_reward_manager(cfg, _Tokenizer(response_text))
        try:
            return manager.loop.run_until_complete(manager.run_single(data))
        finally:
            manager.loop.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(score).result(timeout=60)


@pytest.mark.parametrize("script", sorted(DAPO))
def test_dapo_reward_wiring(script, launched):
    # a correct answer 20000 tokens long: 3616 tokens into the 4096-token buffer before 20480
    cfg = composed(launched, script)
    out = _score_one(cfg, "math_dapo", "34", "… so m + n = 34.\nAnswer: 34", 20000)
    penalty = -(20000 - (20480 - 4096)) / 4096 * 1.0  # −0.8828125
    assert out["reward_score"] == pytest.approx(1.0 + penalty)
    assert out["reward_extra_info"]["acc"] is True  # the dynamic-sampling metric


@pytest.mark.parametrize("script", sorted(PAPER_A))
def test_paper_a_reward_wiring(script, launched):
    cfg = composed(launched, script)
    out = _score_one(cfg, "openai/gsm8k", "72", "<reasoning>48 + 24 = 72</reasoning>\n<answer>72</answer>", 20)
    assert out["reward_score"] == 20.0 and out["reward_extra_info"]["acc"] == 1.0


def test_dapo_validation_metric_names():
    """The names docs/metrics.md's dashboard uses, from verl's own V1 validation aggregation.

    With n=32 samples per AIME problem and the math_dapo scorer (``score``, ``acc``, ``pred``), verl
    makes ``acc`` the core variable: ``val-core/math_dapo/acc/{mean,best,maj}@32``; the ±1 reward
    (with the overlong penalty), the quantity of Paper B's plots, is under ``val-aux/…/reward/``.
    """
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.reward_score import default_compute_score

    sources, uids, info = [], [], {"reward": [], "score": [], "acc": [], "pred": []}
    for problem, answer in enumerate(["34", "204"]):  # 2 problems × 32 samples, 8 of them correct
        for k in range(32):
            result = default_compute_score("math_dapo", f"Answer: {answer if k % 4 == 0 else k}", answer)
            sources.append("math_dapo")
            uids.append(f"uid{problem}")
            info["reward"].append(result["score"])
            for key in ("score", "acc", "pred"):
                info[key].append(result[key])
    metrics = PPOTrainer._val_metrics_update(None, sources, uids, info, [])  # uses no trainer state
    assert metrics["val-core/math_dapo/acc/mean@32"] == pytest.approx(0.25)  # avg@32
    assert metrics["val-core/math_dapo/acc/best@32/mean"] == pytest.approx(1.0)  # pass@32
    assert "val-core/math_dapo/acc/maj@32/mean" in metrics
    assert metrics["val-aux/math_dapo/reward/mean@32"] == pytest.approx(-0.5)  # ±1 reward: 2·acc − 1
    assert metrics["val-aux/math_dapo/reward/best@32/mean"] == pytest.approx(1.0)
    assert "val-aux/math_dapo/acc/best@16/mean" in metrics
