"""Fixtures the Hub tests share."""

import huggingface_hub
import pytest


@pytest.fixture
def hub(hub_server, monkeypatch, tmp_path):
    """The clients of this process (vaswani-push's and transformers') pointed at the local Hub server, with a cache of
    their own."""
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub_server.url)
    template = hub_server.url + "/{repo_id}/resolve/{revision}/{filename}"  # as HF_ENDPOINT makes it at import
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)  # the server speaks LFS
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    huggingface_hub.utils.disable_progress_bars()  # a command's stderr is then its one error line
    yield hub_server
    huggingface_hub.utils.enable_progress_bars()
