"""Executors this package ships itself, run as child processes of serve like any other: nothing
here is imported by the host code (`serve`, `backends`), only started by a launcher."""
