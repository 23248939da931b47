import pytest
import torch
from helpers.hub_server import HubServer


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
