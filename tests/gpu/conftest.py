"""The GPU suite (tests/helpers/gpu.py has its settings): every check takes the `device` fixture, which skips it with
the reason where the device is not there (CI and every CPU machine collect these checks and skip them), and a
`figures` recorder for the report that benchmarks/gpu/run.sh writes."""

import pytest
import torch
from helpers import gpu


@pytest.fixture(scope="session", params=[gpu.DEVICE])
def device(request):
    """The device under test, as a parameter (test ids read `[cuda-...]` or `[cpu-...]`)."""
    if reason := gpu.unavailable():
        pytest.skip(reason)
    # float32 means float32: no TF32 products on the GPU, whatever the defaults of this torch.
    torch.set_float32_matmul_precision("highest")
    return request.param


@pytest.fixture
def figures(request):
    recorder = gpu.Recorder(request.node.nodeid)
    yield recorder
    recorder.write()


@pytest.fixture(autouse=True)
def free_device_memory(request):
    """Each check starts with the device's memory statistics reset and ends with its cache emptied."""
    on_cuda = gpu.is_cuda(gpu.DEVICE) and torch.cuda.is_available()
    if on_cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    yield
    if on_cuda:
        torch.cuda.empty_cache()
