"""The packaged training source list: the benchmark's packages plus more
projects, kept apart from the external list (never trained on)."""

from __future__ import annotations

import json
import re

import pytest

from mlgo_host.corpus import benchmark
from mlgo_host.corpus.corpus import Corpus


def _pypi_name(name: str) -> str:
    """PyPI's normalized project name (PEP 503): Foo_Bar and foo-bar are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _libraries(spec: benchmark.BenchmarkSpec) -> set[str]:
    return {lib.lower() for p in spec.packages for lib in p.libraries}


def _patterns(spec: benchmark.BenchmarkSpec) -> list[str]:
    return [s.lower() for p in spec.packages for u in p.units for s in u.sources]


def test_training_list_is_pinned_and_names_what_it_vendors():
    spec = benchmark.load_spec("training")
    assert spec.opt_level == "-Oz"
    names = [_pypi_name(p.name) for p in spec.packages]
    assert len(names) == len(set(names))
    for p in spec.packages:
        assert re.fullmatch(r"[0-9a-f]{64}", p.sha256), p.name
        assert re.fullmatch(r"\d+(\.\d+)+", p.version), p.name  # an exact release, no range
        assert p.filename.endswith((f"-{p.version}.tar.gz", f"-{p.version}.zip")), p.name
        assert p.units and all(u.sources for u in p.units), p.name
        assert p.libraries, f"{p.name}: list the projects it vendors (what keeps the corpora apart)"
    assert len(_libraries(spec)) >= 15
    pats = _patterns(spec)
    assert any(s.endswith(".c") for s in pats) and any(s.endswith((".cc", ".cpp")) for s in pats)


def test_training_list_holds_the_benchmark_as_it_is():
    # Same sdists, sources and flags give the same module names, and the
    # train / validation / held-out split is a hash of the name: the benchmark's
    # held-out modules stay held out in the training corpus.  The one change
    # allowed is dropping xxHash's own sources, since the external corpus has
    # xxHash.
    train = {p.name: p for p in benchmark.load_spec("training").packages}
    for b in benchmark.load_spec("benchmark").packages:
        t = train[b.name]
        assert (t.version, t.filename, t.sha256, len(t.units)) == (b.version, b.filename, b.sha256, len(b.units))
        for tu, bu in zip(t.units, b.units):
            assert (tu.sources, tu.flags) == (bu.sources, bu.flags), b.name
            assert set(bu.exclude) <= set(tu.exclude), b.name
            assert all("xxhash" in x for x in set(tu.exclude) - set(bu.exclude)), b.name


def test_training_and_external_lists_share_no_project():
    train, ext = benchmark.load_spec("training"), benchmark.load_spec("external")
    assert not {_pypi_name(p.name) for p in train.packages} & {_pypi_name(p.name) for p in ext.packages}
    # Two packages can vendor one library (zstd in pyzstd and zstandard):
    # compare what they say they vendor, and the paths that name a library.
    train_libs, ext_libs = _libraries(train), _libraries(ext)
    assert ext_libs and not train_libs & ext_libs
    for pat in _patterns(train):
        assert not any(lib in pat for lib in ext_libs), pat
    for pat in _patterns(ext):
        assert not any(lib in pat for lib in train_libs), pat


@pytest.mark.slow
def test_a_training_package_downloads_and_builds_with_clang_19(tmp_path):
    # diStorm (8 small C files): the real pip download, sha256 check and build.
    out = tmp_path / "corpus"
    report = benchmark.build_benchmark(out, cache_dir=tmp_path / "cache", spec_path="training",
                                       packages=["distorm3"], jobs=2, progress=False)
    assert report.failures == [] and report.built == 8
    corpus = Corpus.load(out)
    assert all(m.name.startswith("distorm3-3.5.2/src/") for m in corpus.modules)
    assert len(corpus.modules) == 8
    entry = json.loads((out / "compile_commands.json").read_text())[0]
    assert entry["arguments"][:2] == ["clang-19", "-Oz"]
