"""Fixtures the Hub tests share."""

import huggingface_hub
import pytest
from helpers.hub_server import point_clients_at


@pytest.fixture
def hub(hub_server, monkeypatch, tmp_path):
    """The clients of this process pointed at the local Hub server for one test (`point_clients_at`)."""
    point_clients_at(hub_server, monkeypatch, tmp_path / "hub-cache")
    huggingface_hub.utils.disable_progress_bars()  # a command's stderr is then its one error line
    yield hub_server
    huggingface_hub.utils.enable_progress_bars()
