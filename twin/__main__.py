"""`python -m twin ...`: the command line lives in `twin.cli.main`."""
import sys

from twin.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
