"""Start-up validation: runs in the driver before Ray or any worker starts.

Errors are incompatible settings (one ``ConfigError``, a ``ValueError``, naming the key and the
fix); warnings are settings that run but depart from what the papers use. ``check_training_config``
is every check ``python -m gtpo_verl.main`` runs before Ray starts (``gtpo.dry_run=true`` stops
there; ``gtpo-preflight`` runs it too): ours (``validate_gtpo_config``), verl's
``validate_config`` and the registries. The checks only read the config: values derived from
other keys are set before them by ``derive_config`` (``trainer/derive.py``).
"""

from __future__ import annotations

import difflib
import logging
import os
import warnings
from typing import Any

from gtpo_verl.plugin.config import ConfigError, check_value, select, to_dict
from gtpo_verl.plugin.estimators import ALGORITHM_BLOCKS, ESTIMATORS
from gtpo_verl.plugin.losses import LOSS_AGG_MODE, LOSS_NAME
from gtpo_verl.trainer.audit_dump import validate_audit_config
from gtpo_verl.trainer.settings import GTPOSettings
from gtpo_verl.trainer.verl_keys import check_verl_keys

logger = logging.getLogger(__name__)


class GTPOConfigWarning(UserWarning):
    """A setting that runs but departs from the paper's setup."""


def _warn(message: str) -> None:
    logger.warning(message)
    warnings.warn(message, GTPOConfigWarning, stacklevel=3)


def validate_gtpo_config(config: Any) -> list[str]:
    """Check a composed trainer config; raise on incompatible settings, return the warnings given."""
    given: list[str] = []

    def warn(message: str) -> None:
        given.append(message)
        _warn(message)

    estimator = str(select(config, "algorithm.adv_estimator", ""))
    loss_mode = str(select(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))
    agg = str(select(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    row = ESTIMATORS.get(estimator)

    _check_registered_names(estimator, loss_mode)
    check_verl_keys(config)
    use_v1 = select(config, "trainer.use_v1", True)
    if use_v1 is not True:
        raise ConfigError(
            "trainer.use_v1",
            f"`trainer.use_v1={str(use_v1).lower() if isinstance(use_v1, bool) else repr(use_v1)}`: gtpo_verl runs on verl's V1 trainer only (the deprecated V0 trainer's fit() pops the "
            "old-policy entropy our estimators need and has no DAPO dynamic sampling). Set trainer.use_v1=true."
        )
    for block_cls in (*ALGORITHM_BLOCKS, GTPOSettings):  # every block must parse, used or not
        block_cls.from_config(config)
    _check_batch_shape(config, estimator, row)
    _check_entropy_watch_batch(config, warn)
    validate_audit_config(config)
    if GTPOSettings.from_config(config).probe and row is None:
        raise ConfigError(
            "gtpo.probe",
            f"`gtpo.probe=true` reports the mechanism of gtpo_verl's estimators {list(ESTIMATORS)}, not "
            f"`algorithm.adv_estimator={estimator}`: probe the recipe's gtpo_verl counterpart, or set gtpo.probe=false."
        )
    _check_reward_model_http(config)
    _check_worker_env_vars(config)
    _check_resume_state(config)

    transforms = validate_adv_transforms(config)
    declared = _declared_estimator_inputs(estimator) or ()
    reads_old_pass = row is not None or "entropys" in declared or "old_log_probs" in declared
    needs_entropy = [f"algorithm.adv_estimator={estimator}"] if reads_old_pass else []
    needs_entropy += [
        f"algorithm.adv_transforms[{i}].name={t.name}" for i, (t, _knobs) in enumerate(transforms) if "entropys" in t.inputs
    ]
    if needs_entropy and bool(select(config, "algorithm.rollout_correction.bypass_mode", False)):
        raise ConfigError(
            "algorithm.rollout_correction.bypass_mode",
            f"`{needs_entropy[0]}` needs old-policy entropy / log-probs, which verl does not compute when "
            "`algorithm.rollout_correction.bypass_mode=true` (the old-log-prob pass is skipped). "
            "Set algorithm.rollout_correction.bypass_mode=false."
        )
    for i, (t, _knobs) in enumerate(transforms):
        if t.name == "high_entropy_tokens" and agg != "token-mean":
            warn(
                f"`algorithm.adv_transforms[{i}].name=high_entropy_tokens` with "
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}`: the paper's objective (and its code) is a token "
                "mean over the batch (docs/spec.md C.1); set actor_rollout_ref.actor.loss_agg_mode=token-mean."
            )
    if row is not None and row.policy_loss is not None and loss_mode != row.policy_loss:
        warn(
            f"`algorithm.adv_estimator={estimator}` with `actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}`: "
            f"{estimator}'s advantages are written for its paper's {row.policy_loss} policy loss; "
            f"set policy_loss.loss_mode={row.policy_loss}."
        )
    if loss_mode == LOSS_NAME and (row is None or row.policy_loss != LOSS_NAME):
        warn(
            f"`policy_loss.loss_mode={LOSS_NAME}` with `algorithm.adv_estimator={estimator}`: the loss treats each "
            "response's mean token advantage as its sequence advantage; the paper pairs it with the estimator of "
            f"the same name (adv_estimator={LOSS_NAME})."
        )
    if row is not None:
        row.check(config, row.config.from_config(config), warn)

    if row is not None or loss_mode == LOSS_NAME:
        written_for = row.loss_agg_mode if row is not None else LOSS_AGG_MODE
        owner = estimator if row is not None else f"the {LOSS_NAME} loss"
        if agg != written_for:
            warn(
                f"`actor_rollout_ref.actor.loss_agg_mode={agg}` differs from what {owner} is written for; "
                f"the paper's form is loss_agg_mode={written_for}."
            )
    return given


def check_training_config(config: Any) -> list[str]:
    """Every start-up check of ``python -m gtpo_verl.main``, in its order, before Ray starts; returns the warnings.

    Ours (``validate_gtpo_config``), then verl's own ``validate_config`` (its assertions become one
    ``ConfigError``), then the registries. ``gtpo.dry_run=true`` and ``gtpo-preflight`` run exactly this.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from gtpo_verl.plugin.registry import check_registered
    from gtpo_verl.trainer.platform_guard import refuse_cpu_mode_on_gpu

    refuse_cpu_mode_on_gpu(config)  # GTPO_VERL_CPU / VERL_PLATFORM=cpu inherited by a GPU run
    given = validate_gtpo_config(config)
    use_critic = need_critic(config)

    def warn(message: str) -> None:
        given.append(message)
        _warn(message)

    _check_model_paths(config, use_critic, warn)
    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=use_critic)
    except ConfigError:
        raise
    except Exception as err:  # verl asserts, raises ValueError, or Hydra wraps both in InstantiationException
        text = " ".join(str(err).split()) or type(err).__name__
        raise ConfigError("verl", f"verl's validate_config refused the config: {text}") from None
    check_registered()
    return given


def _check_model_paths(config: Any, use_critic: bool, warn) -> None:
    """Local-looking model paths that are not folders on this machine (the driver), each by who reads it where.

    ``actor_rollout_ref.model.path`` (actor, rollout and reference) is read by the workers on their own
    nodes, which may keep it on node-local disks the driver lacks: a warning, never a refusal
    (``gtpo-preflight`` checks it on every node). ``critic.model.path`` is read on the driver too:
    verl's ``validate_config``, which runs there before Ray starts (verl's own ``main`` runs it as we do),
    builds the critic's ``HFModelConfig``, which loads its config and tokenizer from that path. A critic
    folder missing here is refused by verl in any case; this names it first.
    """
    path = str(select(config, "actor_rollout_ref.model.path", "") or "")
    if _missing_local_folder(path):
        warn(
            f"`actor_rollout_ref.model.path={path}` is not a folder on this machine (the driver): the actor, rollout "
            "and reference workers load it on their own nodes, so it must be there (gtpo-preflight checks every "
            "node). Otherwise set it to the model's folder or a Hugging Face id."
        )
    path = str(select(config, "critic.model.path", "") or "")
    if use_critic and _missing_local_folder(path):
        estimator = select(config, "algorithm.adv_estimator", "gae")
        raise ConfigError(
            "critic.model.path",
            f"`critic.model.path={path}` is not a folder on this machine, and `algorithm.adv_estimator={estimator}` "
            "trains a critic, whose model verl's validate_config loads here on the driver. Set critic.model.path to "
            "a model folder on this machine, or choose an estimator without a critic "
            f"(algorithm.adv_estimator={', '.join(ESTIMATORS)}, grpo, ...).",
        )


def _missing_local_folder(path: str) -> bool:
    """``path`` looks local (``/``, ``~``, ``.``) but is not a folder here (a Hugging Face id is never local)."""
    return path.startswith(("/", "~", ".")) and not os.path.isdir(os.path.expanduser(path))


def _check_registered_names(estimator: str, loss_mode: str) -> None:
    """The estimator and policy loss named in the config exist in verl's registries (our plugin and users' loaded)."""
    import verl  # noqa: F401  (loads every verl.plugins entry point: users' estimators and losses register there)
    from verl.trainer.ppo import core_algos

    for key, name, registry, kind in (
        ("algorithm.adv_estimator", estimator, core_algos.ADV_ESTIMATOR_REGISTRY, "advantage estimator"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", loss_mode, core_algos.POLICY_LOSS_REGISTRY, "policy loss"),
    ):
        if name in registry:
            continue
        close = difflib.get_close_matches(name, list(registry), n=1, cutoff=0.6)
        raise ConfigError(
            key,
            f"`{key}={name}` is not a registered {kind}"
            + (f"; did you mean `{key}={close[0]}`?" if close else "")
            + f" Registered: {sorted(registry)}. An estimator or loss of your own package registers through its "
            "`verl.plugins` entry point (docs/trainer.md).",
        )


def _check_batch_shape(config: Any, estimator: str, row) -> None:
    """The batch keys our code divides by or groups on: positive integers, and groups for the group estimators."""
    prompts = check_value("data.train_batch_size", select(config, "data.train_batch_size"), int)
    n = check_value("actor_rollout_ref.rollout.n", select(config, "actor_rollout_ref.rollout.n", 1), int)
    for key, value in (("data.train_batch_size", prompts), ("actor_rollout_ref.rollout.n", n)):
        if value < 1:
            raise ConfigError(key, f"`{key}={value}` must be >= 1.")
    if row is not None and n < 2:
        raise ConfigError(
            "actor_rollout_ref.rollout.n",
            f"`actor_rollout_ref.rollout.n={n}` with `algorithm.adv_estimator={estimator}`: {estimator} compares the "
            f"responses of one prompt's group, and a group of one has nothing to compare (every advantage would be 0). "
            "Set actor_rollout_ref.rollout.n >= 2 (the papers sample 8-16).",
        )


def _check_entropy_watch_batch(config: Any, warn) -> None:
    """Warn when a batch holds fewer prompts than the entropy watch's rising flag needed to stay quiet in the lab."""
    settings = GTPOSettings.from_config(config)
    if not settings.diagnostics:
        return
    knobs = settings.entropy_warning
    prompts = int(select(config, "data.train_batch_size"))
    needed = knobs.quiet_min_prompts()
    if needed is not None and prompts >= needed:
        return
    quiet_here = "" if needed is None else f" at fewer than {needed} prompts a step"
    fix = f"set data.train_batch_size>={needed}, or " if needed is not None else "set "
    default = type(knobs)()
    warn(
        f"`data.train_batch_size={prompts}` with `{knobs.key('ratio')}={knobs.ratio}` and "
        f"`{knobs.key('persist_steps')}={knobs.persist_steps}`: replayed on the lab's runs, this rising-entropy rule "
        f"raised false alarms on runs that never degrade{quiet_here} (docs/lab.md, the entropy watch); {fix}"
        f"{knobs.key('ratio')}={default.ratio} {knobs.key('persist_steps')}={default.persist_steps} "
        f"(the defaults: quiet from {default.quiet_min_prompts()} prompt a step)."
    )


def resume_folder(config: Any):
    """The checkpoint folder verl will resume from (its own rule for ``trainer.resume_mode``), or None."""
    import os

    mode = str(select(config, "trainer.resume_mode", "auto"))
    if mode == "resume_path":
        folder = select(config, "trainer.resume_from_path")
    elif mode == "auto":
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        root = str(select(config, "trainer.default_local_dir", ""))
        root = root if os.path.isabs(root) else os.path.join(os.getcwd(), root)
        if not os.path.exists(os.path.join(root, "latest_checkpointed_iteration.txt")):
            return None  # a fresh start (verl's lookup would print that it found no tracker file)
        folder = find_latest_ckpt_path(root)
    else:
        return None
    if folder is None:
        return None
    folder = str(folder)
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def _check_resume_state(config: Any) -> None:
    """A resume from a checkpoint gtpo_verl did not save (no ``gtpo_state.json``) is refused unless accepted."""
    import os

    from gtpo_verl.trainer.state import STATE_FILE

    folder = resume_folder(config)
    if folder is None or not os.path.isdir(folder) or os.path.exists(os.path.join(folder, STATE_FILE)):
        return
    if GTPOSettings.from_config(config).remeasure_on_resume:
        return
    raise ConfigError(
        "gtpo.remeasure_on_resume",
        f"trainer.resume_mode={select(config, 'trainer.resume_mode', 'auto')} resumes from {folder}, which has no "
        f"{STATE_FILE} (⟨H⟩_ini, the entropy watch): it was not saved through python -m gtpo_verl.main, and resuming "
        "would measure ⟨H⟩_ini again on the trained policy, moving Paper A's gate. Set gtpo.remeasure_on_resume=true "
        "to accept that, or trainer.resume_mode=disable to start afresh.",
    )


def _check_worker_env_vars(config: Any) -> None:
    """Ray takes worker environment variables as strings: ``derive_config`` writes numbers and booleans as strings;
    anything else (``null``, a list) is refused here."""
    from gtpo_verl.trainer.derive import ENV_VARS_KEY as key

    for name, value in to_dict(select(config, key), key).items():
        if not isinstance(value, (str, int, float, bool)):
            raise ConfigError(
                f"{key}.{name}",
                f"`{key}.{name}={value!r}`: Ray takes worker environment variables as strings only; give it a value "
                f"(e.g. {key}.{name}=1) or drop the override.",
            )


def _check_reward_model_http(config: Any) -> None:
    """A generative reward model served by verl's vLLM over HTTP needs the API left open (plugin/vllm_auth.py)."""
    import os

    from gtpo_verl.plugin.vllm_auth import SWITCH

    generative = bool(select(config, "reward.reward_model.enable", False)) and select(
        config, "reward.custom_reward_function.path") is not None
    if not generative or str(select(config, "reward.reward_model.rollout.name", "vllm")) != "vllm":
        return
    from gtpo_verl.trainer.derive import ENV_VARS_KEY

    env_vars = to_dict(select(config, ENV_VARS_KEY), ENV_VARS_KEY)
    if str(env_vars.get(SWITCH, os.environ.get(SWITCH, ""))).lower() == "off":
        return
    raise ConfigError(
        "reward.reward_model.enable",
        "`reward.reward_model.enable=true` with a custom reward function: verl's reward loop calls the reward model's "
        "vLLM server at /v1/chat/completions without an API key, and gtpo_verl gives every vLLM server a key no one "
        f"holds (docs/reproduce.md, section 1). To serve it open on the node's address, set "
        f"+{ENV_VARS_KEY}.{SWITCH}=off.",
    )


def validate_adv_transforms(config: Any) -> list:
    """Parse ``algorithm.adv_transforms`` against the registered transforms (one clear error per problem)."""
    entries = select(config, "algorithm.adv_transforms")
    if entries is None or len(entries) == 0:
        return []
    import verl  # noqa: F401  (loads every verl.plugins entry point: users' transforms register there)

    import gtpo_verl.plugin.registry  # noqa: F401  (the built-in transforms)
    from gtpo_verl.plugin.extensions import parse_adv_transforms

    return parse_adv_transforms(entries)


def _declared_estimator_inputs(estimator: str):
    from gtpo_verl.plugin.extensions import estimator_inputs

    return estimator_inputs(estimator)
