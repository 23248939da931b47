import pytest
from helpers.transformers_tests import register_markers


def pytest_configure(config):
    # transformers' common tests (test_transformers_common.py) carry marks its own conftest.py registers.
    register_markers(config)


@pytest.fixture(scope="module", autouse=True)
def model_tests_on_one_thread(one_thread):
    """The models here are tiny: one thread runs them fastest, the more so when another job holds the other core."""
