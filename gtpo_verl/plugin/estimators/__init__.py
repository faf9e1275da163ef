"""The estimator table: one module per advantage estimator gtpo_verl ships, one row each.

Each module (``gtpo_token.py``, ``grpo_s.py``, ``gtpo_traj.py``) is the one place that knows its
estimator: the registered name (``algorithm.adv_estimator=<name>``, a literal there and nowhere
else in the package), the per-token inputs it declares (``plugin/extensions.py``), its config block
(``algorithm.<name>``, the single source of its defaults), its pure function (``algorithms/``) and
``run`` (that function called from the block and one ``EstimatorBatch``), the diagnostics hook
(``outcome``: which rows count as successes and failures; ``metrics``: its own ``gtpo/*`` metrics),
the loss aggregation and policy loss its paper writes, and its start-up checks. The row type is
``row.py``.

Readers: ``register_estimators`` (one verl adapter per row, below), start-up validation, the
diagnostics and the audit dump (``trainer/``), the offline audit (``tools/audit.py``, whose
recomputation is ``run``), the lab and the device check (``benchmarks/check_device.py``). A new
estimator is one module here beside its pure function, and one entry in ``ESTIMATORS``
(docs/trainer.md, "Adding a built-in estimator").

No verl import at module level: the device check reads the table with torch alone.
"""

from __future__ import annotations

from typing import Callable

import torch

from gtpo_verl.plugin.config import content_key, select, to_dict
from gtpo_verl.plugin.threads import one_cpu_thread
from gtpo_verl.plugin.context import bound_estimator_input, record_estimator_output
from gtpo_verl.plugin.estimators.grpo_s import GRPO_S
from gtpo_verl.plugin.estimators.gtpo_token import GTPO_TOKEN
from gtpo_verl.plugin.estimators.gtpo_traj import GTPO_TRAJ
from gtpo_verl.plugin.estimators.row import Estimator, EstimatorBatch, EstimatorCall
from gtpo_verl.plugin.extensions import register_entropy_aware_estimator

ESTIMATORS: dict[str, Estimator] = {row.name: row for row in (GTPO_TOKEN, GRPO_S, GTPO_TRAJ)}

ALGORITHM_BLOCKS: tuple[type, ...] = tuple(row.config for row in ESTIMATORS.values())
"""The algorithm blocks (``algorithm.<estimator>``), in table order."""


def _verl_adapter(row: Estimator) -> Callable:
    """verl's estimator signature around ``row.run``: ``(token_level_rewards, response_mask, index, config)``
    plus the declared inputs as keyword arguments → ``(advantages, returns)``, zeros outside the mask.

    ``config`` is verl's ``algorithm`` node; ``index`` the uids. The declared inputs arrive resolved
    (``register_entropy_aware_estimator``); ⟨H⟩_ini is the keyword ``initial_entropy``, else the bound
    datum (``plugin/context.py``). The ``EstimatorCall`` (block, batch, result) goes back to the caller
    that bound the inputs. On the CPU the call runs on one thread (``plugin/threads.py``).

    Settings parsed once per run: the adapter keeps the last ``algorithm.<name>`` block it parsed,
    keyed on that node's resolved content (``content_key``: every value with its type), and parses
    again only when the content differs, so a config changed between calls never gets the old block.
    """
    owner = f"advantage estimator {row.name!r}"
    name = row.config.path.partition(".")[2]  # algorithm.<name>: the key under verl's algorithm node
    last: tuple = (None, None)  # (content key, block) of the last block parsed

    def settings(config):
        nonlocal last
        values = to_dict(select(config, name), row.config.path)
        key = content_key(values)
        cached_key, cached_block = last  # one read: another thread may replace the pair meanwhile
        if key is not None and key == cached_key:
            return cached_block
        block = row.config.from_dict(values)
        if key is not None:
            last = (key, block)
        return block

    def adapter(token_level_rewards, response_mask, index=None, config=None, *, initial_entropy=None, **inputs):
        block = settings(config)
        if initial_entropy is None:
            initial_entropy = bound_estimator_input("initial_entropy")
        scores = token_level_rewards.sum(-1)  # verl's outcome reward sits on each response's last token
        batch = EstimatorBatch.build(owner, scores, response_mask, index, initial_entropy, **inputs)
        with torch.no_grad(), one_cpu_thread(response_mask):
            result = row.run(block, batch)
        record_estimator_output(row.name, EstimatorCall(row.name, block, batch, result))
        advantages = result.advantages.to(token_level_rewards.dtype)
        return advantages, advantages

    adapter.__name__ = adapter.__qualname__ = f"compute_{row.name}_advantage"
    adapter.__doc__ = row.summary
    return adapter


def register_estimators() -> None:
    """Register every row in verl's ``ADV_ESTIMATOR_REGISTRY`` through the public decorator (imports verl)."""
    for row in ESTIMATORS.values():
        register_entropy_aware_estimator(row.name, inputs=row.inputs, optional=row.optional,
                                         finite_by_construction=True)(_verl_adapter(row))


__all__ = ["ALGORITHM_BLOCKS", "ESTIMATORS", "Estimator", "EstimatorBatch", "EstimatorCall", "register_estimators"]
