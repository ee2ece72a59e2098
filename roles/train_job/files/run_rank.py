"""Run one rank of a job: the entry script as __main__, with its arguments.

mpirun starts every rank as `python run_rank.py --logs DIR ENTRY ARGS...`.
The rank's stdout and stderr (its file descriptors, so native libraries'
output too) go to DIR/1/rank.N/stdout and stderr on its node: the layout
Open MPI 4's --output-filename writes, made here because Open MPI 5's
loses the output of every rank but the first to make the folder
(openpmix/openpmix#3651, fixed after Debian 13's PMIx) and names the folder
after the job's namespace. A rank that
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


def rank_number(environ):
    """This process's rank in MPI_COMM_WORLD, as Open MPI (1.10 to 5), PMIx or a PMI launcher says."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if environ.get(name, "").isdigit():
            return int(environ[name])
    raise RuntimeError("no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK): "
                       "run_rank.py runs under mpirun")


def log_to(folder, rank):
    """Point this process's stdout and stderr at folder/1/rank.N/{stdout,stderr} (appended)."""
    path = os.path.join(folder, "1", "rank.{}".format(rank))
    os.makedirs(path, mode=0o750, exist_ok=True)
    for stream, name in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
        stream.flush()
        target = os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(target, stream.fileno())
        os.close(target)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--logs":
        log_to(sys.argv[2], rank_number(os.environ))
        del sys.argv[1:3]
    if len(sys.argv) < 2:
        print("usage: run_rank.py [--logs DIR] ENTRY [ARGS...]", file=sys.stderr)
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
