"""Entry point: ``python -m gtpo_verl.main [hydra overrides]``.

verl's own V1 PPO trainer (``trainer.use_v1=true``, any ``trainer.v1.trainer_mode``) with
the GTPO trainer mixin, on ``gtpo_verl/config/gtpo_trainer.yaml`` (verl's ``ppo_trainer`` plus
our algorithm blocks). Before Ray starts, first the installed verl is checked for every piece a
training run uses (``gtpo_verl/verl_surface.py``: a verl without the V1 trainer or TransferQueue is
one line on stderr naming the missing piece and the supported verl, exit status 1); then ``derive_config`` sets the values that follow from
other keys (each logged), then every start-up check runs (``check_training_config``: ours,
verl's ``validate_config``, the registries; they only read the config); ``gtpo.dry_run=true``
stops there. Then the
preflight (``gtpo-preflight``: every node of the cluster, ``gtpo.preflight=false`` skips it), then
training. A config error is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys

import hydra

CONFIG_ERROR_STATUS = 2  # a usage error: the config, not the machine
UNSUPPORTED_VERL_STATUS = 1  # the installed verl lacks a piece gtpo_verl needs (as gtpo-preflight's failed checks)


def run(config) -> None:
    """Validate ``config`` and run training (the body of ``main``, callable from code)."""
    warnings = check(config)
    if not _dry_run(config, warnings):
        _train(config)


def check(config) -> list[str]:
    """The installed verl's surface, then the derived values, then every start-up check, before Ray starts
    (CPU mode switched on first when ``trainer.device=cpu``). Raises ``UnsupportedVerl`` for a verl
    without a piece a run needs."""
    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import check_training_config
    from gtpo_verl.verl_surface import check_startup

    check_startup()  # the V1 trainer, TransferQueue, ...: one line here, not an ImportError in the mixin

    if str(config.trainer.device) == "cpu":  # opt-in CPU mode (gtpo_verl/cpu), before Ray starts
        from gtpo_verl.cpu import activate
        from gtpo_verl.cpu.workers import actor_threads

        activate()
        actor_threads(1)  # a bad GTPO_VERL_CPU_ACTOR_THREADS fails here, not in a Ray worker
    derive_config(config)
    return check_training_config(config)


def _dry_run(config, warnings: list[str]) -> bool:
    """With ``gtpo.dry_run=true``: say the config is valid and stop (True); else False."""
    from gtpo_verl.trainer.settings import GTPOSettings

    if not GTPOSettings.from_config(config).dry_run:
        return False
    print(
        f"gtpo_verl: config valid for training (algorithm.adv_estimator={config.algorithm.adv_estimator}, "
        f"{len(warnings)} warning{'s' * (len(warnings) != 1)}); gtpo.dry_run=true: nothing started."
    )
    return True


def _train(config) -> None:
    from verl.trainer.main_ppo import run_ppo

    from gtpo_verl.tools.preflight import preflight_enabled, run_preflight
    from gtpo_verl.trainer.mixin import make_task_runner
    from gtpo_verl.trainer.watchdog import exit_on_known_error

    if preflight_enabled(config):
        run_preflight(config)  # exits 1 with one line per failed check before any worker starts
    try:
        run_ppo(config, task_runner_class=make_task_runner())
    except Exception as exc:
        exit_on_known_error(exc)  # one line: the watchdog's status 3 (requeued), a no-op method's 4 (not)
        raise


@hydra.main(config_path="config", config_name="gtpo_trainer", version_base=None)
def main(config) -> None:
    from gtpo_verl.verl_surface import UnsupportedVerl

    try:
        warnings = check(config)
    except UnsupportedVerl as err:  # a verl without the V1 trainer or TransferQueue: one line, nothing started
        print(f"gtpo_verl: {err}", file=sys.stderr)
        sys.exit(UNSUPPORTED_VERL_STATUS)
    except ValueError as err:  # a bad setting: one line naming the key and the fix, nothing started
        print(f"gtpo_verl: config error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_STATUS)
    if not _dry_run(config, warnings):
        _train(config)


if __name__ == "__main__":
    main()
