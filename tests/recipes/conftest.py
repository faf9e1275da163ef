"""The recipe tests' shared fixtures: the launcher stubs, and what every training recipe launches."""

import pytest

from support.launchers import make_stub_bin
from support.recipes import launch_every_recipe


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return make_stub_bin(tmp_path_factory.mktemp("stub_bin"))


@pytest.fixture(scope="module")
def launched(stubs, tmp_path_factory):
    """``support.recipes.launch_every_recipe``, once per test module."""
    return launch_every_recipe(stubs, tmp_path_factory.mktemp("launches"))
