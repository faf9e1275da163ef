"""Checkpoint rotation across a restart (gtpo_verl/trainer/checkpoints.py), through verl's real
``_save_checkpoint`` / ``_load_checkpoint`` (folder layout, data.pt, the latest-step tracker,
resume_mode=auto) and verl's real rotation (``BaseCheckpointManager.ensure_checkpoint_capacity`` /
``register_checkpoint``, whose list of saved paths starts empty in every process).

The FSDP actor worker group cannot run here: ``RotatingActorGroup`` stands in for it and does to the
folder what rank 0 of verl's FSDP checkpoint manager does (verl's own rotation calls, a shard file).
"""

import os
from pathlib import Path

import pytest
from support.hydra import compose_gtpo

from gtpo_verl.trainer.checkpoints import prune_checkpoints


class RotatingActorGroup:
    """Stands in for the FSDP actor worker group: verl's rotation, then a shard file in ``local_path``."""

    def __init__(self):
        from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

        self.manager = object.__new__(BaseCheckpointManager)  # its rotation state only (no model, no process group)
        self.manager.previous_saved_paths = []

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        self.manager.ensure_checkpoint_capacity(max_ckpt_to_keep)  # as FSDPCheckpointManager.save_checkpoint, rank 0
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "model_world_size_1_rank_0.pt").write_bytes(b"\0" * 64)  # stands for ~0.4 TB at 32B
        self.manager.register_checkpoint(local_path, max_ckpt_to_keep)

    def load_checkpoint(self, *args, **kwargs):
        pass


class DataloaderStub:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def trainer(folder, keep, mixed=True):
    """A V1 sync trainer (the GTPO one, or verl's own) that saves into ``folder`` with a fresh worker group."""
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.trainer.ppo.v1.trainer_base import build_checkpoint_callback

    from gtpo_verl.trainer.mixin import gtpo_trainer_class

    config = compose_gtpo(f"trainer.default_local_dir={folder}", "trainer.resume_mode=auto",
                          f"trainer.max_actor_ckpt_to_keep={'null' if keep is None else keep}")
    made = object.__new__(gtpo_trainer_class(PPOTrainerSync) if mixed else PPOTrainerSync)
    made.config = config
    made.actor_rollout_wg = RotatingActorGroup()
    made.train_dataloader = DataloaderStub()
    made.checkpoint_callback = build_checkpoint_callback(config)
    made.use_critic = False
    made.trainer_mode = "sync"
    made.global_steps = 0
    return made


def run(made, steps):
    for step in steps:
        made.global_steps = step
        made._save_checkpoint()


def actors(folder):
    return sorted(int(p.parent.name.removeprefix("global_step_")) for p in Path(folder).glob("global_step_*/actor"))


@pytest.mark.parametrize("mixed", [False, True])
def test_a_restart_keeps_only_the_newest_checkpoints(mixed, tmp_path):
    first = trainer(tmp_path, keep=2, mixed=mixed)
    run(first, [5, 10, 15])
    assert actors(tmp_path) == [10, 15]  # verl's own rotation, within one process
    requeued = trainer(tmp_path, keep=2, mixed=mixed)  # a new process: verl's list of saved paths is empty
    requeued._load_checkpoint()  # resume_mode=auto: the newest checkpoint
    assert requeued.global_steps == 15
    run(requeued, [20, 25])
    if mixed:
        assert actors(tmp_path) == [20, 25]
    else:  # verl alone: the checkpoints saved before the restart stay for good
        assert actors(tmp_path) == [10, 15, 20, 25]
    # the rest of each step folder stays, as verl's own rotation leaves it (data.pt, our state)
    assert (tmp_path / "global_step_5" / "data.pt").exists() and (tmp_path / "global_step_10" / "data.pt").exists()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "25"


def test_limits_and_what_is_never_touched(tmp_path):
    unlimited = trainer(tmp_path / "all", keep=None)
    run(unlimited, [1, 2, 3])
    run(trainer(tmp_path / "all", keep=None), [4])
    assert actors(tmp_path / "all") == [1, 2, 3, 4]  # null: every checkpoint kept, as verl does

    one = trainer(tmp_path / "one", keep=1)
    run(one, [1, 2])
    run(trainer(tmp_path / "one", keep=1), [3])
    assert actors(tmp_path / "one") == [3]

    # resumed from an older checkpoint: the newer ones (another branch of the run) are not this save's to remove
    folder = tmp_path / "branch"
    run(trainer(folder, keep=2), [10, 20, 30])
    (folder / "global_step_9").mkdir()  # a step folder without model state
    (folder / "notes").mkdir()
    (folder / "notes" / "actor").mkdir(parents=True)
    config = trainer(folder, keep=2).config
    assert prune_checkpoints(config, 25) == []  # 20 is the one older than 25 it keeps; 30 is newer
    assert prune_checkpoints(config, 35) == [str(folder / "global_step_20" / "actor")]
    assert actors(folder) == [30] and (folder / "notes" / "actor").is_dir() and (folder / "global_step_9").is_dir()
    assert prune_checkpoints(trainer("hdfs://namenode/ckpts", keep=1).config, 5) == []  # remote storage: verl's
