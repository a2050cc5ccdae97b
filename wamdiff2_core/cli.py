"""``python -m wamdiff2_core.cli ...`` (e.g. under torchrun) runs the `wamdiff2` command;
the command itself lives in :mod:`wamdiff2_core.apps.cli`."""
from wamdiff2_core.apps.cli import run

if __name__ == "__main__":
    run()
