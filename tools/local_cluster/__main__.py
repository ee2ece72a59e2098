"""python -m local_cluster: the command line (cli.py)."""

import sys

from local_cluster.cli import main

sys.exit(main())
