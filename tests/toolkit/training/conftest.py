"""What the training tests share: torch's thread count given back after a test that sets it (a plan applies its
measured count, as the job does)."""

import pytest
import torch


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield threads
    torch.set_num_threads(threads)
