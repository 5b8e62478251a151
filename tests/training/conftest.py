"""Fixtures of the trainer tests."""

import gin
import pytest


@pytest.fixture
def fresh_gin():
    """No gin binding of one test reaches the next (modules that parse configs use it for each test)."""
    gin.clear_config()
    yield
    gin.clear_config()
