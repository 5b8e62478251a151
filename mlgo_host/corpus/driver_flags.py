"""The clang *driver* flags a corpus drops from a compile command, for both driver-form commands: a
compile database entry (to build a module from its source) and a ``global_command_override`` (to
compile a module's bitcode).  The cc1 form has its own: ``corpus.clean_cc1``.  Neither keeps a mode
(``-c``, ``-S``, ``-emit-llvm``): each caller adds its own.
"""

from __future__ import annotations

from typing import Callable, Sequence

#: flags that take a value (the next argument, or joined with ``=``) and name
#: an output or a side file
OUTPUT_WITH_VALUE = ("-o", "-MF", "-MT", "-MQ", "-MJ", "-dumpdir", "-dumpbase", "-split-dwarf-file",
                     "-split-dwarf-output", "-dependency-file", "--serialize-diagnostics")
#: flags alone that choose what is emitted or write dependency files
OUTPUT_ALONE = ("-c", "-S", "-E", "-MD", "-MMD", "-M", "-MM", "-MP", "-emit-llvm", "-pipe", "-Werror")
#: prefixes of flags written in one argument: bitcode embedding, (Thin)LTO, side outputs, -Werror=...,
#: attached values of the flags above (-MFdeps.d, -ofile.o)
OUTPUT_PREFIXES = ("-fembed-bitcode", "-flto", "-fthinlto-index", "-save-temps", "-Werror=", "-Wp,-MD", "-Wp,-MMD",
                   "-gsplit-dwarf", "-MF", "-MT", "-MQ", "-MJ", "--serialize-diagnostics", "-o")
#: flags with a value that only make sense when the input is the source
SOURCE_ONLY_WITH_VALUE = ("-x", "-fprofile-sample-use", "-fprofile-remapping-file")


def strip_driver_flags(args: Sequence[str], *, is_input: Callable[[str], bool] | None = None,
                       bitcode_input: bool = False) -> list[str]:
    """``args`` (without the compiler) without outputs, side files and mode flags; ``is_input``: which
    argument is the input, to drop; ``bitcode_input``: also drop what only suits a source input
    (its language, its sample profile)."""
    with_value = OUTPUT_WITH_VALUE + (SOURCE_ONLY_WITH_VALUE if bitcode_input else ())
    out: list[str] = []
    rest = iter(args)
    for a in rest:
        if a in with_value:
            next(rest, None)  # its value
        elif not (a in OUTPUT_ALONE or a.startswith(OUTPUT_PREFIXES) or a.split("=", 1)[0] in with_value
                  or (is_input is not None and is_input(a))):
            out.append(a)
    return out
