from helpers.transformers_tests import register_markers


def pytest_configure(config):
    # transformers' common tests (test_transformers_common.py) carry marks its own conftest.py registers.
    register_markers(config)
