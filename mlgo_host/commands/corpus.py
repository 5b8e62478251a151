"""Build corpora in the layout of LLVM's mlgo-utils (corpus_description.json,
per module <m>.bc and its NUL-separated cc1 command <m>.cmd).

  build      from a compile database (compile_commands.json): each module's
             bitcode before any LLVM pass (-Xclang -disable-llvm-passes, never
             -O0 bitcode, which carries optnone) and the cc1 job of the
             original compile.  Failures are listed and skipped; modules
             already built are kept.

  benchmark  the reproducible benchmark corpus: C and C++ vendored in pinned
             PyPI sdists, checked against their sha256, built at -Oz;
             idempotent.  --sources external builds projects the benchmark
             does not contain, for measuring generalization; --sources
             training, the benchmark's packages plus 23 more sdists.

  debian     Debian (bookworm main) source packages of
             mlgo_host/data/debian_packages.txt, each built by its own build
             system under bear with clang-19 at -Oz; the recorded compiles
             (vendored copies and tests left out) are modules PACKAGE/path.
             A package that does not build is skipped with its reason in
             OUTPUT/packages.json; a second run builds what is missing.

  combine    one corpus from several (mlgo-utils' combine_training_corpus):
             project folders are linked into OUTPUT, so names and the split
             by project stay as they were.

examples:
  mlgo-host corpus build --compile-commands build/compile_commands.json --output corpus/
  mlgo-host corpus benchmark --output bench_corpus/
  mlgo-host corpus benchmark --sources external --output external_corpus/
  mlgo-host corpus benchmark --sources training --output training_corpus/ -j2
  mlgo-host corpus debian --packages iniparser,json-c --output debian_corpus/ -j2
  mlgo-host corpus combine training_corpus/ debian_corpus/ --output wide/
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

from mlgo_host.commands.help import HelpFormatter, seconds
from mlgo_host.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    action = functools.partial(sub.add_parser, formatter_class=HelpFormatter)
    b = action("build", help="build a corpus from a compile database (compile_commands.json)",
               description="Build an mlgo-utils corpus from a compile database.")
    b.add_argument("--compile-commands", required=True, metavar="PATH",
                   help="the compile database to build from (compile_commands.json)")
    _common(b)
    b.add_argument("--opt", metavar="LEVEL", default=None,
                   help="replace every -O flag of the entries with this one (e.g. -Oz); "
                        "entries compiled at -O0 are otherwise skipped")
    b.add_argument("--force", action="store_true", help="rebuild modules that already exist")
    m = action("benchmark", help="download and build the benchmark corpus (pinned PyPI sdists)",
               description="Build the benchmark corpus (or, with --sources training, the larger training "
                           "corpus; with --sources external, the external corpus of projects neither "
                           "contains) from pinned PyPI source distributions.")
    _common(m)
    m.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where sdists are downloaded and extracted "
                        "(default: $XDG_CACHE_HOME/mlgo_host/benchmark, i.e. ~/.cache/mlgo_host/benchmark)")
    m.add_argument("--sources", metavar="NAME|JSON", default=None,
                   help="the pinned sdists and their sha256 (mlgo_host/data/NAME_sources.json): 'benchmark' (the "
                        "default: the corpus to train and hold out from), 'training' (the benchmark's packages "
                        "plus more projects, the same held-out split), 'external' (other projects, to measure "
                        "generalization), or the path of a list in the same format")
    m.add_argument("--package", action="append", metavar="NAME",
                   help="build only this package of the list (repeatable; default: all of them)")
    d = action("debian", help="build a corpus from Debian (bookworm main) source packages",
               description="Build a corpus from Debian (bookworm main) source packages, each configured "
                           "and built by its own build system under bear with clang-19 at -Oz. Needs "
                           "root (or sudo) for apt and the network.")
    _common(d)
    d.add_argument("--packages", metavar="NAME,NAME", default=None,
                   help="build only these packages (default: every one of the packages file)")
    d.add_argument("--packages-file", metavar="PATH", default=None,
                   help="the source packages that may be built, one a line (default: "
                        "mlgo_host/data/debian_packages.txt, the list the project may train on)")
    d.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where sources are downloaded, extracted and built "
                        "(default: $XDG_CACHE_HOME/mlgo_host/debian/src, i.e. ~/.cache/mlgo_host/debian/src)")
    d.add_argument("--no-build-deps", action="store_true",
                   help="do not apt-get build-dep (the build dependencies are installed already)")
    d.add_argument("--retry-skipped", action="store_true",
                   help="try again the packages an earlier run skipped (default: keep them skipped)")
    d.add_argument("--build-timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="time one step of a package's build (configure, make, build-dep) may take")
    c = action("combine", help="combine corpora into one, project by project (links, no copies)",
               description="Link the project folders of CORPUS... into OUTPUT and list every module in "
                           "its corpus_description.json. The links point at the corpora: move them and "
                           "combine again.")
    c.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus directories to combine")
    c.add_argument("--output", required=True, metavar="DIR",
                   help="the combined corpus: a new or empty directory, or one combined before (remade)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, metavar="DIR", help="corpus directory to create or complete")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="parallel compiles (default: the number of CPUs)")
    p.add_argument("--clang", default="clang-19", metavar="PATH",
                   help="clang driver that emits the bitcode and the cc1 commands")
    p.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS", help="time one compile may take")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run(args: argparse.Namespace) -> int:
    from mlgo_host.channel.fifo import install_signal_cleanup
    from mlgo_host.corpus.build import build_corpus, load_compile_commands

    install_signal_cleanup()  # SIGTERM/SIGHUP unwind like Ctrl-C: a build step's own process group is killed

    if args.corpus_command is None:
        raise ConfigError("choose an action: mlgo-host corpus build ..., benchmark ..., debian ... or combine ...")
    if args.corpus_command == "combine":
        from mlgo_host.corpus.combine import combine_corpora
        from mlgo_host.corpus.corpus import project_of

        names = combine_corpora(args.corpora, args.output)
        projects = len({project_of(n) for n in names})
        print(f"{args.output}: {len(names)} modules from {projects} projects of {len(args.corpora)} corpora")
        return 0
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    progress = not args.no_progress
    if args.corpus_command == "build":
        entries = load_compile_commands(args.compile_commands)
        report = build_corpus(entries, args.output, clang=args.clang, jobs=args.jobs, opt_level=args.opt,
                              timeout=args.timeout, progress=progress, force=args.force)
    elif args.corpus_command == "debian":
        from mlgo_host.corpus.debian import build_debian

        report = build_debian(args.output, packages=args.packages, packages_file=args.packages_file,
                              cache_dir=args.cache_dir, clang=args.clang, jobs=args.jobs,
                              build_deps=not args.no_build_deps, retry_skipped=args.retry_skipped,
                              build_timeout=args.build_timeout, timeout=args.timeout, progress=progress)
    else:
        from mlgo_host.corpus.benchmark import build_benchmark

        report = build_benchmark(args.output, cache_dir=args.cache_dir, spec_path=args.sources, clang=args.clang,
                                 jobs=args.jobs, progress=progress, packages=args.package)
    for src, reason in report.failures:
        print(f"failed {src}: {reason}", file=sys.stderr)
    print(f"{args.output}: {report.summary()}")
    return 0
