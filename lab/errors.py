"""The one exception type the CLI turns into a one-line error."""


class LabError(Exception):
    """A problem the user can fix; the CLI prints it on one line and exits non-zero."""
