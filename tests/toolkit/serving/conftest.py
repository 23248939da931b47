"""The server the serving tests talk to: started for real on 127.0.0.1 (a free port) in its own process, once for the
folder's tests, with a tiny model (the default) and, where CTranslate2 is installed, its export."""

import subprocess
import time
import urllib.request

import pytest
from helpers.training_setup import command, free_port, tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    """The checkpoint exported to CTranslate2, or None where CTranslate2 is not installed."""
    try:
        from modeling_vaswani.toolkit.interop.ctranslate2 import export_ctranslate2
    except ImportError:  # the ctranslate2 extra
        return None
    return export_ctranslate2(str(checkpoint), tmp_path_factory.mktemp("exported") / "ct2")


@pytest.fixture(scope="module")
def server(checkpoint, exported):
    port = free_port()
    models = [str(checkpoint)] + ([str(exported)] if exported else [])
    process = subprocess.Popen(
        [*command("serve"), *models, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                break
        except OSError:
            assert process.poll() is None, process.stdout.read().decode()
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=30)
