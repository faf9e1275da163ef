"""Checkpoint rotation that survives a restart.

verl 0.9.1 rotates checkpoints inside its checkpoint manager (``previous_saved_paths`` on the actor's
rank 0), a list that starts empty in every process: after a requeue or any restart, the checkpoints
saved before it are never deleted, so each restart leaves ``trainer.max_actor_ckpt_to_keep`` more
behind (about 0.4 TB each for a 32B actor with its optimizer state). After each save this removes,
from the checkpoint folders on disk, the model state of every checkpoint older than the newest
``max_actor_ckpt_to_keep`` (``max_critic_ckpt_to_keep`` for the critic), the one just saved
included: what verl's own rotation removes (``global_step_N/actor``, ``…/critic``), whichever
process saved it. Checkpoints newer than the current step (a resume from an older one) are left.
"""

from __future__ import annotations

import logging
import os
import re
import shutil

logger = logging.getLogger(__name__)

STEP_FOLDER = re.compile(r"^global_step_(\d+)$")  # verl's layout: <default_local_dir>/global_step_N/{actor,critic,data.pt}
ROLE_LIMITS = {"actor": "max_actor_ckpt_to_keep", "critic": "max_critic_ckpt_to_keep"}


def prune_checkpoints(config, global_step: int) -> list[str]:
    """Remove the role folders of checkpoints beyond ``trainer.max_<role>_ckpt_to_keep``, counting the
    one saved at ``global_step``; returns the removed paths. A limit of null keeps everything (verl's default)."""
    trainer = config.trainer
    root = str(trainer.default_local_dir)
    if "://" in root or not os.path.isdir(root):
        return []
    older = sorted(
        (int(found.group(1)), name) for name in os.listdir(root)
        if (found := STEP_FOLDER.match(name)) and int(found.group(1)) < int(global_step)
    )
    removed = []
    for role, key in ROLE_LIMITS.items():
        keep = 1 if trainer.get("remove_previous_ckpt_in_save", False) else trainer.get(key, None)
        if keep is None or isinstance(keep, bool) or int(keep) <= 0:
            continue
        saved = [os.path.join(root, name, role) for _, name in older if os.path.isdir(os.path.join(root, name, role))]
        for path in saved[: max(len(saved) - (int(keep) - 1), 0)]:  # the newest keep - 1 older ones stay
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        logger.info("gtpo: removed %d checkpoint folder(s) beyond the limits (%s)", len(removed), ", ".join(removed))
    return removed
