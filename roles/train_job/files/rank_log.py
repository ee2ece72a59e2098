"""Run one MPI rank with its stdout and stderr in logs\\1\\rank.N\\ (Windows nodes).

MS-MPI's mpiexec has no --output-filename; this wrapper gives every rank the
same log layout Open MPI writes on Linux, on the node where the rank runs:

    mpiexec ... python.exe rank_log.py train.py ARGS...

The rank comes from PMI_RANK, which MS-MPI sets for every process. The exit
code is the rank's, so mpiexec still sees a failed rank. Python 3.6.
"""

import os
import subprocess
import sys


def main(argv):
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    log_dir = os.path.join(os.getcwd(), "logs", "1", "rank.{}".format(int(rank)))
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, "stdout"), "ab") as out, open(os.path.join(log_dir, "stderr"), "ab") as err:
        return subprocess.call([sys.executable] + argv, stdout=out, stderr=err)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
