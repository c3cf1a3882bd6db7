"""``python -m replmon.cli``: the command line, as the stages' subprocesses are started."""

import sys

from replmon.cli.main import main

sys.exit(main())
