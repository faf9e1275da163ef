"""No secret in a traced line: every script under recipes/ runs under ``bash -x`` with a Ray token and
other secrets in its environment, and no traced line (nor any other output) contains them.

``bash -x`` prints each command after expansion, so a script that tests or passes a token by value
(``[[ -n "${RAY_AUTH_TOKEN:-}" ]]``) would print it into the job log. Secrets in the environment
are handed to child processes through the environment, never through a command line.
"""

import pytest

from support.launchers import make_stub_bin, run_script, slurm_env
from support.paths import REPO_ROOT as ROOT

TOKEN = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"
SECRETS = {"RAY_AUTH_TOKEN": TOKEN, "WANDB_API_KEY": "wandbkey" + "0" * 32, "HF_TOKEN": "hf_" + "x" * 34}
SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").rglob("*") if p.suffix in (".sh", ".sbatch"))
SOURCED = {  # run through the others
    "recipes/launch.sh", "recipes/common/trainer_tail.sh", "recipes/dapo/common.sh", "recipes/gtpo_traj/common.sh",
}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return make_stub_bin(tmp_path_factory.mktemp("stub_bin"))


def _assert_clean(proc):
    text = proc.stdout + proc.stderr
    for name, secret in SECRETS.items():
        assert secret not in text, f"{name} printed:\n" + "\n".join(l for l in text.splitlines() if secret in l)


CONTAINERS = {"recipes/containers/build_image.sh", "recipes/containers/install_into_image.sh"}


@pytest.mark.parametrize("script", sorted(set(SCRIPTS) - SOURCED - CONTAINERS - {"recipes/slurm/ray_on_slurm.sbatch",
                                                                                  "recipes/data/prepare_all.sh"}))
@pytest.mark.parametrize("mode", ["run", "dry_run", "preflight", "ray_submit"])
def test_training_recipes_never_print_a_secret(stubs, tmp_path, script, mode):
    env = {**SECRETS, "RAY_AUTH_MODE": "token"}
    env.update({"run": {"LAUNCHER": "direct"}, "dry_run": {"DRY_RUN": 1}, "preflight": {"DRY_RUN": "preflight"},
                "ray_submit": {"LAUNCHER": "ray", "RAY_ADDRESS": "http://10.0.0.1:8265"}}[mode])
    proc, calls = run_script(stubs, tmp_path, script, trace=True, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "+ " in proc.stderr  # really traced
    _assert_clean(proc)
    for _tool, _address, _launcher, argv in calls:  # nor on any command line a child was given
        assert not any(secret in arg for arg in argv for secret in SECRETS.values())


@pytest.mark.parametrize("container", [{}, {"CONTAINER_IMAGE": "verl.sqsh"}, {"APPTAINER_IMAGE": "verl.sif"}])
def test_the_slurm_job_never_prints_a_secret(stubs, tmp_path, container):
    env = {**slurm_env(tmp_path), **SECRETS, **container, "RECIPE": "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"}
    proc, calls = run_script(stubs, tmp_path, "recipes/slurm/ray_on_slurm.sbatch", trace=True, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "+ " in proc.stderr
    _assert_clean(proc)
    for _tool, _address, _launcher, argv in calls:
        assert not any(secret in arg for arg in argv for secret in SECRETS.values())


@pytest.mark.parametrize("args", [("build_image.sh", "enroot"), ("build_image.sh", "apptainer"), ("build_image.sh", "docker"),
                                  ("install_into_image.sh", ".")])
def test_the_image_build_never_prints_a_secret(stubs, tmp_path, args):
    script, *rest = args
    proc, calls = run_script(stubs, tmp_path, f"recipes/containers/{script}", *rest, trace=True, TMPDIR=tmp_path, **SECRETS)
    assert "+ " in proc.stderr
    _assert_clean(proc)
    for _tool, _address, _launcher, argv in calls:
        assert not any(secret in arg for arg in argv for secret in SECRETS.values())


def test_every_script_is_covered():
    covered = {"recipes/slurm/ray_on_slurm.sbatch", "recipes/data/prepare_all.sh"} | CONTAINERS | SOURCED
    training = {p for p in SCRIPTS if p.startswith(("recipes/dapo/", "recipes/gtpo_traj/"))}
    assert set(SCRIPTS) == covered | training


def test_the_data_preparation_never_prints_a_secret(stubs, tmp_path):
    proc, _calls = run_script(stubs, tmp_path, "recipes/data/prepare_all.sh", trace=True, RAY_DATA_HOME=tmp_path, **SECRETS)
    _assert_clean(proc)


def test_the_check_would_catch_a_leak(stubs, tmp_path):
    """The old form of the token test, traced, prints the token: the assertion above can fail."""
    leaky = tmp_path / "leaky.sh"
    leaky.write_text('[[ -n "${RAY_AUTH_TOKEN:-}" ]] && echo has-token\n')
    proc, _ = run_script(stubs, tmp_path, str(leaky), trace=True, **SECRETS)
    with pytest.raises(AssertionError, match="RAY_AUTH_TOKEN printed"):
        _assert_clean(proc)
