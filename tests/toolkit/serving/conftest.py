"""The server the serving tests talk to: started for real on 127.0.0.1 (a free port) in its own process, with a tiny
model, once for the folder's tests."""

import subprocess
import time
import urllib.request

import pytest
from helpers.training_setup import command, free_port, tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def server(checkpoint):
    port = free_port()
    process = subprocess.Popen(
        [*command("serve"), str(checkpoint), "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
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
