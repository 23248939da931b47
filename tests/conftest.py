import os

import pytest
import torch
from helpers import wheel
from helpers.hub_server import HubServer
from helpers.once import once_per_run
from hypothesis import HealthCheck, settings

# Property tests (hypothesis): 200 examples each, no per-example deadline (a shared 2-core host stalls at random), the
# database off so that a run depends on nothing a previous run left. HYPOTHESIS_PROFILE=thorough for 2,000 examples.
settings.register_profile(
    "ci", max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory):
    """A Hub-compatible server on 127.0.0.1, shared by the session: give each test its own repo names."""
    with HubServer(tmp_path_factory.mktemp("hub")) as server:
        yield server


@pytest.fixture
def hub_env(hub_server, tmp_path):
    """Environment for a client subprocess (see `hub_server.run_client`) using `hub_server`, with its own HF_HOME."""
    return hub_server.client_env(tmp_path / "hf_home")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on one thread (`pytestmark = pytest.mark.usefixtures("one_thread")`): a second thread only waits,
    and waits long when another job holds the other core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """The wheel built from the checkout and installed into a new virtual environment outside it (helpers/wheel.py)."""
    return once_per_run(tmp_path_factory, "wheel", wheel.install)


@pytest.fixture(scope="session")
def main_job(installed, tmp_path_factory):
    """The main job run once a session by the installed vaswani-train from an empty folder, for the wheel test and
    the command tests: the folder (its output in runs/small) and the finished process (stdout, stderr)."""
    return once_per_run(tmp_path_factory, "main-job", lambda work: (work, wheel.main_job(installed, work)))
