"""The two kinds of failure a `1bit` command reports: the user's (exit 2) and the run's (exit 1)."""


class UsageError(Exception):
    """Wrong or conflicting options; the CLI prints the message and exits 2."""


class RunError(Exception):
    """The command could not do its work; the CLI prints the one-line reason and exits 1."""


class RecipeError(Exception):
    """A recipe file that cannot be used: names the file, the recipe and the reason."""
