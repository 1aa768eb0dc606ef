"""``python -m vla_recover``: the ``vla-recover`` command, as ``torchrun -m vla_recover train`` starts it."""

from vla_recover.cli.main import app

if __name__ == "__main__":  # the package walks of the docs and import tests import this module too
    app()
