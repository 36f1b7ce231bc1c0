"""`python -m twin.i18n update | check` (see catalog.py)."""
from __future__ import annotations

import sys

from .catalog import problems, update


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["update"]:
        for lang, n in update().items():
            print(f"{lang}: {n} untranslated")
        return 0
    if argv == ["check"]:
        found = problems()
        print("\n".join(found) or "catalogs complete")
        return 1 if found else 0
    print("usage: python -m twin.i18n update | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
