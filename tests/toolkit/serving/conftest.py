"""The server the serving tests talk to: started for real on 127.0.0.1 (a free port) in its own process, once for the
folder's tests, with a tiny model trained on helpers' TINY_PAIRS (the default) and, where CTranslate2 is installed,
its export."""

import subprocess
import time
import urllib.request

import pytest
from helpers.training_setup import command, free_port, trained_tiny_checkpoint

MAX_INPUT_TOKENS = 64  # the server's --max_input_tokens, below the tiny model's positions


@pytest.fixture(scope="package")
def max_input_tokens():
    return MAX_INPUT_TOKENS


@pytest.fixture(scope="package")
def checkpoint(tmp_path_factory):
    return trained_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="package")
def exported(checkpoint, tmp_path_factory):
    """The checkpoint exported to CTranslate2, or None where CTranslate2 is not installed."""
    try:
        from modeling_vaswani.toolkit.interop.ctranslate2 import export_ctranslate2
    except ImportError:  # the ctranslate2 extra
        return None
    return export_ctranslate2(str(checkpoint), tmp_path_factory.mktemp("exported") / "ct2")


@pytest.fixture(scope="package")
def server(checkpoint, exported, tmp_path_factory):
    port = free_port()
    models = [str(checkpoint)] + ([str(exported)] if exported else [])
    log = tmp_path_factory.mktemp("server") / "server.log"  # a file, not a pipe nobody reads that could fill
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command("serve"), *models, "--port", str(port), "--max_input_tokens", str(MAX_INPUT_TOKENS)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=30)
