"""The packaged external source list (projects the benchmark corpus does not
contain) and the ``--sources`` short names.  No network: nothing here gets
as far as downloading."""

from __future__ import annotations

import fnmatch
import re

import pytest

from mlgo_host.cli import main
from mlgo_host.corpus import benchmark
from mlgo_host.errors import CorpusError

# Libraries the benchmark corpus is made of: the external list must not bring
# another copy of any of them (a generalization measure on code seen in training).
BENCHMARK_LIBRARIES = ("brotli", "zstd", "lz4", "libuv", "double-conversion", "fasttext", "libtom")


def _patterns(spec: benchmark.BenchmarkSpec) -> list[str]:
    return [s for p in spec.packages for u in p.units for s in u.sources]


def test_external_list_is_pinned_and_mixes_c_and_cxx():
    spec = benchmark.load_spec("external")
    assert spec.opt_level == "-Oz" and len(spec.packages) >= 4
    for p in spec.packages:
        assert re.fullmatch(r"[0-9a-f]{64}", p.sha256), p.name
        assert re.fullmatch(r"\d+(\.\d+)+", p.version), p.name  # an exact release, no range
        assert p.filename.endswith(f"-{p.version}.tar.gz"), p.name
        assert p.units and all(u.sources for u in p.units), p.name
    pats = _patterns(spec)
    assert any(s.endswith(".c") for s in pats) and any(s.endswith((".cc", ".cpp")) for s in pats)


def test_external_list_shares_nothing_with_the_benchmark():
    bench, ext = benchmark.load_spec("benchmark"), benchmark.load_spec("external")
    assert not {p.name for p in bench.packages} & {p.name for p in ext.packages}
    for pat in _patterns(ext):
        assert not any(lib in pat.lower() for lib in BENCHMARK_LIBRARIES), pat


@pytest.mark.parametrize("name", sorted(benchmark.PACKAGED_SPECS))
def test_every_exclude_is_a_file_its_unit_would_pick(name):
    # An exclude that matches none of its unit's patterns is a typo: the file it
    # meant to drop would still be compiled (or fail to).
    for p in benchmark.load_spec(name).packages:
        for u in p.units:
            for ex in u.exclude:
                assert any(fnmatch.fnmatch(ex, s) for s in u.sources), f"{p.name}: {ex}"


def test_short_names_resolve_to_the_packaged_lists(tmp_path):
    ext = benchmark.resolve_spec_path("external")
    assert ext.name == "external_sources.json" and ext.is_file()
    assert benchmark.resolve_spec_path("benchmark") == benchmark.resolve_spec_path(None)
    assert benchmark.resolve_spec_path(None).name == "benchmark_sources.json"
    assert benchmark.resolve_spec_path("training").name == "training_sources.json"
    own = tmp_path / "mine.json"
    assert benchmark.resolve_spec_path(str(own)) == own and benchmark.resolve_spec_path(own) == own
    with pytest.raises(CorpusError, match=r"not found \(give a path or one of: benchmark, training, external\)"):
        benchmark.load_spec(str(tmp_path / "external"))


def test_benchmark_command_reads_the_external_list_by_its_short_name(tmp_path, capsys):
    # --package names a benchmark package that the external list lacks: the
    # command stops after reading the list, before any download.
    out = str(tmp_path / "c")
    assert main(["corpus", "benchmark", "--sources", "external", "--package", "brotli", "--output", out]) == 2
    assert "no package of the benchmark list matches ['brotli']" in capsys.readouterr().err
    missing = str(tmp_path / "none.json")
    assert main(["corpus", "benchmark", "--sources", missing, "--output", out]) == 2
    assert "none.json: benchmark source list not found" in capsys.readouterr().err
