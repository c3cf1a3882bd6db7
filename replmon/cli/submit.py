"""spark-submit's entry file for the streaming job: ``spark-submit [its options] <this file> --config FILE`` runs
what ``replmon stream --config FILE`` runs, on the master, packages and --conf spark-submit gives
(``replmon package`` prints the whole command)."""

import sys

from replmon.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["stream", *sys.argv[1:]]))
