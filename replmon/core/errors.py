"""The one error type a user sees, a single clear line and a non-zero exit from the CLI; and how any error is named
in such a line."""


class ReplmonError(Exception):
    """An error caused by the environment or by user input; its message is meant for the operator."""


def describe(error: BaseException) -> str:
    """An error as a log line or a sample names it: its class and its message, the class said once (kafka-python's
    errors name it in their message already: "[Error 7] RequestTimedOutError", "KafkaTimeoutError: ...")."""
    name, text = type(error).__name__, str(error).strip()
    return text if name in text else f"{name}: {text}" if text else name
