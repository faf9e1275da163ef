"""The one verl pin, gtpo_verl/config/REQUIRED_VERL.txt, and everything that reads it."""

from support.paths import REPO_ROOT as ROOT


def test_verl_pin():
    """The one pin (gtpo_verl/config/REQUIRED_VERL.txt), what setup.py made of it in the installed package's
    requirements, what the preflight checks, and the verl these tests composed against agree."""
    import importlib.metadata

    import verl

    from gtpo_verl.tools import preflight

    pin = (ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text().splitlines()[0].strip()
    assert pin == f"verl=={verl.__version__}" == "verl==0.9.1"
    requires = importlib.metadata.requires("gtpo_verl") or []
    assert "verl[verl-core]==0.9.1" in requires and 'verl[vllm]==0.9.1; extra == "gpu"' in requires
    assert preflight.VERL_VERSION == verl.__version__
