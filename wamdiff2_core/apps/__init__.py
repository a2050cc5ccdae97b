"""Entry points: the `wamdiff2` command's subcommands and the decoding benchmark. Imports run
from here down into the domain packages, never the other way."""
