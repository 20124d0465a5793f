"""``python -m minimpi ...`` is the ``minimpi`` command."""
import sys

from minimpi.launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())
