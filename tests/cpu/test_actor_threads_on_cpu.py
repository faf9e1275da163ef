"""CPU mode gives each FSDP rank its share of the node's cores (Ray starts every actor on one thread).

The rule (``actor_threads``), the environment that marks a verl worker-group rank
(``set_rank_threads``), and the real thing: a rank of verl's own ``RayWorkerGroup`` on a local Ray
cluster computes on every core, while a plain Ray actor beside it keeps Ray's one thread.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from gtpo_verl.cpu.workers import ACTOR_THREADS_ENV, actor_threads, available_cores, set_rank_threads

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "actor_threads_script.py")
RANK_ENV = {"WG_BACKEND": "ray", "RANK": "0", "RAY_LOCAL_WORLD_SIZE": "1"}


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_cores_are_shared_evenly_among_the_ranks_of_a_node(monkeypatch):
    monkeypatch.delenv(ACTOR_THREADS_ENV, raising=False)
    assert actor_threads(1, cores=2) == 2
    assert actor_threads(2, cores=2) == 1
    assert actor_threads(3, cores=16) == 5
    assert actor_threads(4, cores=2) == 1  # never below one thread


def test_a_fixed_count_overrides_and_a_bad_one_names_the_variable(monkeypatch):
    monkeypatch.setenv(ACTOR_THREADS_ENV, "3")
    assert actor_threads(1, cores=2) == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(ACTOR_THREADS_ENV, bad)
        with pytest.raises(ValueError, match=ACTOR_THREADS_ENV):
            actor_threads(1, cores=2)


def test_a_bad_count_is_one_line_at_start_up_before_ray(tmp_path):
    from support.run_files import write_run_files

    from gtpo_verl.cpu.launch import run_sizes, trainer_command

    root = write_run_files(tmp_path, train_rows=8, val_rows=8)
    sizes = run_sizes(str(root), str(root / "model"), prompts=4, group=4, mini_batch=4, lr=1e-3, steps=2, seed=0)
    env = dict(os.environ, **{ACTOR_THREADS_ENV: "two"})
    out = subprocess.run(trainer_command(sizes + ["algorithm.adv_estimator=grpo", "gtpo.dry_run=true"]),
                         env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("gtpo_verl: config error:")]
    assert len(errors) == 1 and ACTOR_THREADS_ENV in errors[0] and "unset it" in errors[0], out.stderr[-2000:]
    assert "Started a local Ray instance" not in out.stdout + out.stderr


def test_only_a_worker_group_rank_changes_its_threads(monkeypatch, restore_threads):
    monkeypatch.delenv(ACTOR_THREADS_ENV, raising=False)
    for key in RANK_ENV:
        monkeypatch.delenv(key, raising=False)
    torch.set_num_threads(1)
    assert set_rank_threads() is None and torch.get_num_threads() == 1  # the driver, a plain task or actor
    for key, value in RANK_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(ACTOR_THREADS_ENV, "2")
    assert set_rank_threads() == 2 and torch.get_num_threads() == 2
    monkeypatch.delenv("RANK")
    torch.set_num_threads(1)
    assert set_rank_threads() is None and torch.get_num_threads() == 1


@pytest.mark.skipif(available_cores() < 2, reason="one core: a rank and a plain task both get one thread")
def test_a_rank_of_verls_worker_group_computes_on_every_core():
    # a fresh interpreter: the script selects the CPU platform for its whole process
    env = {k: v for k, v in os.environ.items() if k != ACTOR_THREADS_ENV}
    out = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"rank_threads": [available_cores()], "plain_task_threads": 1}
