"""Another name for :mod:`.copytext`, for the callers outside the search
that import :func:`roots_of` from it (tests/test_clang_versions.py)."""

from mlgo_host.search.copytext import roots_of

__all__ = ["roots_of"]
