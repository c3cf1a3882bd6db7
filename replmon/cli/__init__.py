"""The front door: the ``replmon`` command line. It parses arguments, decides which clusters to watch (the
configured ones, else the local cluster of the test bed) and hands a complete configuration to the stage that
implements the command.

The top floor: nothing below imports it."""

from replmon.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
