"""The one error type a user sees: a single clear line, and a non-zero exit from the CLI."""


class ReplmonError(Exception):
    """An error caused by the environment or by user input; its message is meant for the operator."""
