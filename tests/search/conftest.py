"""The modules the batched search's tests share, built once (see
``tests/helpers/_search_helpers.py``)."""

from __future__ import annotations

import pytest

from _search_helpers import build_search_corpus


@pytest.fixture(scope="session")
def batched_corpus(tmp_path_factory):
    return build_search_corpus(tmp_path_factory.mktemp("batched"))
