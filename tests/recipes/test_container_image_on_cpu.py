"""The GPU image with gtpo_verl in it (recipes/containers/): what each build path runs, with the
container runtimes shadowed (tests/support/launchers.py), and install_into_image.sh under a real pip.

- build_image.sh enroot / apptainer / docker: verl's image as the base, the same five sources staged,
  install_into_image.sh run inside (GPU-less: a build host has no GPU), a squashfs / .sif / tag out;
  the Dockerfile and its ignore file stage the same sources.
- install_into_image.sh in a stand-in of verl's image (a venv with torch 2.11.0+cu130 pinning NCCL
  2.28.9, and NCCL 2.29.7 installed past that pin with --no-deps, as verl's Dockerfile does), with the
  real setup.py and requirements/gpu.txt, against a local wheel index (no network): pip alone pulls
  NCCL back to torch's pin; the script puts the image's back and leaves its CUDA stack as it was; a
  dependency that wants a newer torch fails the build naming torch instead of replacing it.
"""

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
from support.launchers import make_stub_bin, run_script
from support.paths import REPO_ROOT

BUILD = "recipes/containers/build_image.sh"
BASE = "verlai/verl:vllm024.dev2"
STAGED = {"setup.py", "README.md", "gtpo_verl", "requirements/gpu.txt", "recipes/containers/install_into_image.sh"}
VERSION = re.search(r'^__version__ = "([^"]+)"$', (REPO_ROOT / "gtpo_verl" / "__init__.py").read_text(), re.M).group(1)


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    folder = make_stub_bin(tmp_path_factory.mktemp("stub_bin"))
    # enroot start / docker build: list what the build sees of the staged sources, then record as the stub does
    for tool, source in (("enroot", r'"${!#}"'), ("docker", r'"${!#}"')):
        recorder = folder / f"{tool}.record"
        shutil.move(folder / tool, recorder)
        (folder / tool).write_text(
            "#!/usr/bin/env bash\n"
            'if [[ "$1" == start ]]; then echo "${NVIDIA_VISIBLE_DEVICES-unset} ${MELLANOX_VISIBLE_DEVICES-unset}" '
            '> "${STUB_LOG_DIR}.hook_env"; args=("$@"); for i in "${!args[@]}"; do\n'
            '    [[ "${args[i]}" == --mount ]] && src=${args[i + 1]%%:*}; done\n'
            'elif [[ "$1" == build ]]; then src=' + source + "; fi\n"
            'if [[ -n "${src-}" ]]; then (cd "${src}" && find . -type f ! -path "*/__pycache__/*" | sort) > "${STUB_LOG_DIR}.staged"; fi\n'
            f'exec "{recorder}" "$@"\n'
        )
        (folder / tool).chmod(0o755)
    return folder


def staged(tmp_path):
    (listing,) = tmp_path.glob("calls_*.staged")
    files = [line.removeprefix("./") for line in listing.read_text().splitlines()]
    return files


def top_level(files):
    """The staged sources as STAGED names them (gtpo_verl/ as one folder)."""
    return {f.split("/")[0] if f.startswith("gtpo_verl/") else f for f in files}


def test_enroot_build_imports_verls_image_installs_inside_and_exports_a_squashfs(stubs, tmp_path):
    out = tmp_path / "gtpo.sqsh"
    proc, calls = run_script(stubs, tmp_path, BUILD, "enroot", out, TMPDIR=tmp_path)
    assert proc.returncode == 0, proc.stderr
    steps = [argv for tool, _, _, argv in calls if tool == "enroot.record"]
    assert [argv[0] for argv in steps] == ["import", "create", "start", "export", "remove"]
    imported, created, started, exported, removed = steps
    assert imported[-1] == f"docker://{BASE}" and imported[2] == created[-1]  # the base image, unpacked once
    name = created[created.index("--name") + 1]
    mount = started[started.index("--mount") + 1]
    assert {"--root", "--rw"} <= set(started) and mount.endswith(":/opt/gtpo_verl/src:none:x-create=dir,bind,ro")
    assert started[started.index(mount) + 1:] == [
        name, "bash", "/opt/gtpo_verl/src/recipes/containers/install_into_image.sh", "/opt/gtpo_verl/src"]
    assert exported == ["export", "--output", str(out), name] and removed == ["remove", "--force", name]
    assert top_level(staged(tmp_path)) == STAGED and "gtpo_verl/config/REQUIRED_VERL.txt" in staged(tmp_path)
    assert not list(tmp_path.glob("gtpo_image.*"))  # the scratch folder goes


def test_enroot_build_runs_gpu_less(stubs, tmp_path):
    """verl's CUDA image asks for every GPU (NVIDIA_VISIBLE_DEVICES=all): enroot's nvidia hook would fail
    on a build host without a driver, typically the login node that has the network."""
    proc, calls = run_script(stubs, tmp_path, BUILD, "enroot", tmp_path / "gtpo.sqsh", TMPDIR=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (started,) = [argv for tool, _, _, argv in calls if tool == "enroot.record" and argv[0] == "start"]
    envs = [started[i + 1] for i, arg in enumerate(started) if arg == "--env"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in envs and "MELLANOX_VISIBLE_DEVICES=void" in envs
    assert started.index("--env") < started.index("--mount")  # options, before the container's name
    # and in enroot's own environment, which its hooks prefer to the image's
    (hook_env,) = tmp_path.glob("calls_*.hook_env")
    assert hook_env.read_text().split() == ["void", "void"]


def test_apptainer_build_uses_a_definition_on_verls_image(stubs, tmp_path):
    proc, calls = run_script(stubs, tmp_path, BUILD, "apptainer", tmp_path / "gtpo.sif", TMPDIR=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ((tool, _, _, argv),) = calls
    assert argv[:3] == ["build", "--fakeroot", str(tmp_path / "gtpo.sif")]
    definition = next(tmp_path.glob("calls_*.def")).read_text()
    assert re.search(rf"^Bootstrap: docker\nFrom: {re.escape(BASE)}$", definition, re.M)
    assert re.search(r"^%files\n    \S+/src /opt/gtpo_verl/src$", definition, re.M)
    assert re.search(r"^%post\n    bash /opt/gtpo_verl/src/recipes/containers/install_into_image.sh /opt/gtpo_verl/src$",
                     definition, re.M)


def test_docker_build_and_the_dockerfile_stage_the_same_sources(stubs, tmp_path):
    proc, calls = run_script(stubs, tmp_path, BUILD, "docker", TMPDIR=tmp_path, BASE_IMAGE="verlai/verl:other")
    assert proc.returncode == 0, proc.stderr
    ((_, _, _, argv),) = calls
    assert argv[:3] == ["build", "--file", str(REPO_ROOT / "recipes/containers/Dockerfile")]
    assert "BASE_IMAGE=verlai/verl:other" in argv and argv[argv.index("--tag") + 1] == f"gtpo_verl:{VERSION}-other"
    assert top_level(staged(tmp_path)) == STAGED
    dockerfile = (REPO_ROOT / "recipes/containers/Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={BASE}\nFROM ${{BASE_IMAGE}}\n" in dockerfile
    assert "RUN bash /opt/gtpo_verl/src/recipes/containers/install_into_image.sh /opt/gtpo_verl/src" in dockerfile
    ignore = (REPO_ROOT / "recipes/containers/Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[1] == "*" and {line[1:].rstrip("/") for line in ignore if line.startswith("!")} == STAGED
    # one base image everywhere: the Dockerfile, the build script, the pins' header, the docs' examples
    assert f"BASE_IMAGE=${{BASE_IMAGE:-{BASE}}}" in (REPO_ROOT / BUILD).read_text()
    assert BASE in (REPO_ROOT / "requirements/gpu.txt").read_text().split("\n\n")[0]
    # a runtime that is not one, or not installed: one line, status 2
    for runtime in ("podman", ""):
        proc, calls = run_script(stubs, tmp_path, BUILD, runtime)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "enroot (pyxis), apptainer or docker" in proc.stderr
    proc, _ = run_script(stubs, tmp_path, BUILD, "enroot", PATH="/usr/bin:/bin")
    assert proc.returncode == 2 and "enroot is not on PATH here" in proc.stderr


# ---------------------------------------------------------------- install_into_image.sh, real pip
def write_wheel(folder, name, version, requires=(), extras=()):
    """A pure-Python wheel ``name-version`` holding one empty module, with these Requires-Dist lines."""
    module = name.lower().replace("-", "_")
    dist = f"{module}-{version}"
    files = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
        + "".join(f"Provides-Extra: {e}\n" for e in extras) + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = io.StringIO()
    writer = csv.writer(record)
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(text.encode())])
    writer.writerow([f"{dist}.dist-info/RECORD", "", ""])
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name_in_wheel, text in {**files, f"{dist}.dist-info/RECORD": record.getvalue()}.items():
            wheel.writestr(name_in_wheel, text)
    return path


NCCL = "nvidia-nccl-cu13"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A local wheel index and the gtpo_verl sources (the real setup.py, README and requirements/gpu.txt;
    a one-module gtpo_verl whose registry imports the stand-in verl)."""
    root = tmp_path_factory.mktemp("index")
    wheels = root / "wheels"
    wheels.mkdir()
    for name, version, requires in (
        ("torch", "2.11.0+cu130", [f"{NCCL}==2.28.9", "numpy"]),  # torch pins NCCL exactly, as torch 2.11.0 does
        ("torch", "2.12.0", [f"{NCCL}==2.29.7", "numpy"]),  # a newer torch on the index, to be refused
        (NCCL, "2.28.9", []), (NCCL, "2.29.7", []), ("numpy", "2.2.6", []), ("numpy", "2.4.6", []),
        ("vllm", "0.24.0", ["torch==2.11.0"]), ("flash_attn", "2.8.3", ["torch"]),
        ("transformers", "5.3.0", []), ("transformers", "5.9.0", []),
        ("TransferQueue", "0.1.8", []), ("TransferQueue", "0.1.11", []),
        ("ray", "2.55.1", []), ("tensordict", "0.10.0", ["torch"]),
    ):
        write_wheel(wheels, name, version, requires)
    core = [f'{r}; extra == "verl-core"' for r in ("TransferQueue>=0.1.10", "tensordict<=0.10.0,>=0.8.0", "ray>=2.41.0")]
    write_wheel(wheels, "verl", "0.9.1", ["numpy>=2.0.0", "transformers!=5.6.0,<5.11,>=5.5.3", "torch", *core],
                extras=["verl-core"])

    src = root / "src"
    (src / "requirements").mkdir(parents=True)
    for name in ("setup.py", "README.md", "requirements/gpu.txt"):
        shutil.copy(REPO_ROOT / name, src / name)
    (src / "gtpo_verl" / "config").mkdir(parents=True)
    (src / "gtpo_verl" / "plugin").mkdir()
    (src / "gtpo_verl" / "__init__.py").write_text(f'__version__ = "{VERSION}"\n')
    (src / "gtpo_verl" / "tools").mkdir()
    for name in ("config/REQUIRED_VERL.txt", "tools/required_verl.py"):  # the pin and the parser setup.py reads it with
        shutil.copy(REPO_ROOT / "gtpo_verl" / name, src / "gtpo_verl" / name)
    (src / "gtpo_verl/plugin/__init__.py").write_text("")
    (src / "gtpo_verl/plugin/registry.py").write_text("import verl\n\ndef check_registered():\n    assert verl.__version__\n")
    return wheels, src


@pytest.fixture(scope="module")
def image(index, tmp_path_factory):
    """A venv standing in for verl's image: torch 2.11.0+cu130 with NCCL 2.29.7 installed past torch's pin
    (--no-deps, as verl's Dockerfile does), vLLM, flash-attn, NumPy, transformers 5.3.0, TransferQueue 0.1.8."""
    wheels, _ = index
    root = tmp_path_factory.mktemp("image")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "--isolated", "install", "--no-index", "--find-links", str(wheels), "-q"]
    subprocess.run([*pip, "torch==2.11.0+cu130", "vllm==0.24.0", "flash_attn==2.8.3", "numpy==2.2.6",
                    "transformers==5.3.0", "TransferQueue==0.1.8"], check=True, timeout=300)
    subprocess.run([*pip, "--no-deps", f"{NCCL}==2.29.7"], check=True, timeout=300)
    # the build backend for setup.py: this interpreter's setuptools, copied in (no download)
    import setuptools

    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    for module in ("setuptools", "_distutils_hack"):
        shutil.rmtree(site / module, ignore_errors=True)
        shutil.copytree(Path(setuptools.__file__).parents[1] / module, site / module,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root / "venv"


def stand_in_image(image, wheels, tmp_path):
    """A copy of the stand-in image for one test: (its python, an environment whose pip installs from
    ``wheels`` only, with this machine's pip configuration left out)."""
    subprocess.run(["cp", "-a", str(image), str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = {"PATH": f"{python.parent}:{os.environ['PATH']}", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_BUILD_ISOLATION": "0"}  # pip's inverted switch: 0 turns build isolation off
    return python, env


def freeze(python):
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True)
    return dict(line.split("==", 1) for line in out.stdout.split())


def install(src, env, tmp_path):
    return subprocess.run(["bash", str(REPO_ROOT / "recipes/containers/install_into_image.sh"), str(src)],
                          env=dict(env, STATE_DIR=str(tmp_path / "state")), capture_output=True, text=True, timeout=600)


def test_pip_alone_pulls_the_images_nccl_back_to_torchs_pin(index, image, tmp_path):
    wheels, src = index
    python, env = stand_in_image(image, wheels, tmp_path)
    before = freeze(python)
    assert before[NCCL] == "2.29.7" and before["torch"] == "2.11.0+cu130"
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(src / "requirements/gpu.txt"), str(src)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert freeze(python)[NCCL] == "2.28.9"  # what a plain `pip install -c requirements/gpu.txt` does to verl's image


def test_install_into_image_keeps_the_images_cuda_stack(index, image, tmp_path):
    wheels, src = index
    python, env = stand_in_image(image, wheels, tmp_path)
    before = freeze(python)
    proc = install(src, env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = freeze(python)
    assert f"restoring the image's {NCCL}==2.29.7" in proc.stderr
    for name in ("torch", "vllm", "flash_attn", "numpy", NCCL):
        assert after[name] == before[name], name
    # what moves: gtpo_verl's own requirements, at requirements/gpu.txt's versions
    assert (after["transformers"], after["TransferQueue"], after["verl"], after["ray"]) == ("5.9.0", "0.1.11", "0.9.1", "2.55.1")
    assert after["gtpo_verl"] == VERSION
    stack = (tmp_path / "state" / "image_stack.txt").read_text().splitlines()
    assert {f"{NCCL}==2.29.7", "torch==2.11.0+cu130", "numpy==2.2.6"} <= set(stack)


def test_a_dependency_that_wants_another_torch_fails_the_build_naming_it(index, image, tmp_path):
    wheels, src = index
    python, env = stand_in_image(image, wheels, tmp_path)
    newer = write_wheel(wheels, "peft", "0.99.0", ["torch>=2.12"])  # e.g. a floating dependency's new release
    mine = tmp_path / "src"
    shutil.copytree(src, mine)
    setup = (mine / "setup.py").read_text()
    (mine / "setup.py").write_text(setup.replace('"numpy",\n', '"numpy",\n        "peft",\n', 1))
    assert "peft" in (mine / "setup.py").read_text()
    try:
        proc = install(mine, env, tmp_path)
    finally:
        newer.unlink()
    assert proc.returncode == 1 and "without moving the image's CUDA stack" in proc.stderr
    assert "peft 0.99.0 depends on torch>=2.12" in proc.stdout, proc.stdout  # pip's resolver names the conflict
    assert re.search(r"The user requested \(constraint\) torch==2\.11\.0,", proc.stdout), proc.stdout  # the pins hold
    assert freeze(python)["torch"] == "2.11.0+cu130"
