"""Run one rank of a job: the entry script as __main__, with its arguments.

mpirun starts every rank as `python run_rank.py ENTRY ARGS...`. A rank that
fails (an uncaught exception, or sys.exit with a non-zero status) prints its
traceback and leaves at once with os._exit: a normal exit would run the MPI
library's exit handler (mpi4py's, CNTK's), whose MPI_Finalize waits for the
ranks still blocked in a collective, and the job would hang until its time
limit. A rank that ends without MPI_Finalize makes mpirun stop every other
rank within seconds. A rank that succeeds exits normally. Python 3.6.
"""

import os
import runpy
import sys
import traceback


def _leave(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main():
    if len(sys.argv) < 2:
        print("usage: run_rank.py ENTRY [ARGS...]", file=sys.stderr)
        return 2
    entry = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    # As `python ENTRY` would: the entry's folder first on the import path.
    sys.path[0] = os.path.dirname(entry)
    try:
        runpy.run_path(entry, run_name="__main__")
    except SystemExit as stop:
        if stop.code in (None, 0):
            return 0
        if isinstance(stop.code, int):
            _leave(stop.code)
        print(stop.code, file=sys.stderr)
        _leave(1)
    except BaseException:  # the rank's own error, whatever it is: said, then the rank ends
        traceback.print_exc()
        _leave(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
