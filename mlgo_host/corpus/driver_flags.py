"""The one table of clang *driver* flags a corpus drops from a compile
command, and the stripper both driver-form commands go through: a compile
database entry (:func:`~mlgo_host.corpus.build.compile_flags`, to build the
module from its source) and a corpus's ``global_command_override`` in driver
form (to compile its bitcode).  (The cc1 form has its own flags:
``corpus.clean_cc1``.)

The two differ in two ways, each an option of :func:`strip_driver_flags`:

* ``is_input``: an entry names its source among its arguments (dropped; the
  builder passes it itself), an override names no input;
* ``bitcode_input``: an override recompiles bitcode, so what only makes sense
  for the source goes too: its language (``-x c``) and its sample profile
  (as ml-compiler-opt's ``delete_flags``).

Neither keeps a mode (``-c``, ``-S``, ``-E``, ``-emit-llvm``): each caller
adds its own.
"""

from __future__ import annotations

from typing import Callable, Sequence

#: flags that take a value (the next argument, or joined with ``=``) and name
#: an output or a side file
OUTPUT_WITH_VALUE = ("-o", "-MF", "-MT", "-MQ", "-MJ", "-dumpdir", "-dumpbase", "-split-dwarf-file",
                     "-split-dwarf-output", "-dependency-file", "--serialize-diagnostics")
#: flags alone that choose what is emitted or write dependency files
OUTPUT_ALONE = ("-c", "-S", "-E", "-MD", "-MMD", "-M", "-MM", "-MP", "-emit-llvm", "-pipe", "-Werror")
#: prefixes of flags written in one argument: bitcode embedding, (Thin)LTO, side
#: outputs, -Werror=..., attached values of the flags above (-MFdeps.d, -ofile.o)
OUTPUT_PREFIXES = ("-fembed-bitcode", "-flto", "-fthinlto-index", "-save-temps", "-Werror=", "-Wp,-MD", "-Wp,-MMD", "-gsplit-dwarf",
                   "-MF", "-MT", "-MQ", "-MJ", "--serialize-diagnostics", "-o")
#: flags with a value that only make sense when the input is the source
SOURCE_ONLY_WITH_VALUE = ("-x", "-fprofile-sample-use", "-fprofile-remapping-file")


def strip_driver_flags(args: Sequence[str], *, is_input: Callable[[str], bool] | None = None,
                       bitcode_input: bool = False) -> list[str]:
    """``args`` (a driver command line without the compiler) without outputs,
    side files and mode flags; ``is_input``: which argument is the input (to
    drop); ``bitcode_input``: also drop the flags of a source input."""
    with_value = OUTPUT_WITH_VALUE + (SOURCE_ONLY_WITH_VALUE if bitcode_input else ())
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a in with_value:
            i += 1  # its value
        elif a in OUTPUT_ALONE or a.startswith(OUTPUT_PREFIXES) or a.split("=", 1)[0] in with_value:
            continue
        elif is_input is not None and is_input(a):
            continue
        else:
            out.append(a)
    return out
