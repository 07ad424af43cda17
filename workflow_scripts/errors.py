"""The error every stage raises for bad input; the command-line entry point turns it into one line.

It lives at the bottom, below every stage and the CLI layer, so that domain modules can raise it
without importing the CLI (whose entry point imports the stages back).
"""


class UserInputError(Exception):
    """Bad input (file, column, key, value): reported as one clear line, without a traceback."""
