"""The server the serving tests talk to: started for real on 127.0.0.1 (a free port) in its own process, once for the
folder's tests (a test of a startup, limit or access flag starts its own with `running_server`), with a tiny model
trained on helpers' TINY_PAIRS (the default) and, where CTranslate2 is installed, its export."""

import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

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


@contextmanager
def running_server(arguments: list[str], log: Path, timeout: float = 120):
    """`vaswani-serve ARGUMENTS` on 127.0.0.1 at a free port, in a process of its own, until the block ends; yields
    its URL and process once /health answers. Its output goes to `log` (a file, not a pipe nobody reads that could
    fill)."""
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command("serve"), *arguments, "--port", str(port)], stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1):
                    break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.2)
        yield url, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="package")
def served(checkpoint, exported, tmp_path_factory):
    """The folder's one shared server: (its URL, its log). A test of a startup, limit or access flag starts its own."""
    models = [str(checkpoint)] + ([str(exported)] if exported else [])
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server([*models, "--max_input_tokens", str(MAX_INPUT_TOKENS)], log) as (url, _):
        yield url, log


@pytest.fixture(scope="package")
def server(served):
    return served[0]
