"""`python -m twin.i18n update | check | terms` (see catalog.py and terms.py)."""
from __future__ import annotations

import sys

from twin.i18n import terms
from twin.i18n.catalog import extract, problems, update


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["update"]:
        for lang, n in update().items():
            print(f"{lang}: {n} untranslated")
        return 0
    if argv in (["check"], ["terms"]):
        tmpl = extract()
        found = (problems(tmpl) if argv == ["check"] else []) + [str(h) for h in terms.problems(tmpl)]
        print("\n".join(found) or ("catalogs complete, " if argv == ["check"] else "") + "one term per concept")
        return 1 if found else 0
    print("usage: python -m twin.i18n update | check | terms", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
