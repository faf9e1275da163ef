"""Entry point: ``python -m gtpo_verl.main [hydra overrides]``.

verl's own V1 PPO trainer (``trainer.use_v1=true``, any ``trainer.v1.trainer_mode``) with
the GTPO trainer mixin, on ``gtpo_verl/config/gtpo_trainer.yaml`` (verl's ``ppo_trainer`` plus
our algorithm blocks). Our start-up checks run before Ray starts, then the preflight
(``gtpo-preflight``: every node of the cluster, ``gtpo.preflight=false`` skips it); then verl's own.
"""

from __future__ import annotations

import hydra


def run(config) -> None:
    """Validate ``config`` and run training (the body of ``main``, callable from code)."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from gtpo_verl.plugin.registry import check_registered
    from gtpo_verl.tools.preflight import preflight_enabled, run_preflight
    from gtpo_verl.trainer.mixin import make_task_runner
    from gtpo_verl.trainer.platform_guard import refuse_cpu_mode_on_gpu
    from gtpo_verl.trainer.validation import validate_gtpo_config
    from gtpo_verl.trainer.watchdog import exit_if_stalled

    refuse_cpu_mode_on_gpu(config)  # GTPO_VERL_CPU / VERL_PLATFORM=cpu inherited by a GPU run
    if str(config.trainer.device) == "cpu":  # opt-in CPU mode (gtpo_verl/cpu), before Ray starts
        from gtpo_verl.cpu import activate

        activate()
    auto_set_device(config)
    validate_gtpo_config(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    check_registered()
    if preflight_enabled(config):
        run_preflight(config)  # exits 1 with one line per failed check before any worker starts
    try:
        run_ppo(config, task_runner_class=make_task_runner())
    except Exception as exc:
        exit_if_stalled(exc)  # gtpo.watchdog: one message, exit status 3, so a requeue resumes
        raise


@hydra.main(config_path="config", config_name="gtpo_trainer", version_base=None)
def main(config) -> None:
    run(config)


if __name__ == "__main__":
    main()
