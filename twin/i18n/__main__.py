"""`python -m twin.i18n update | check | terms` (see catalog.py and terms.py). A command: like every
`__main__`, it stands on the command line's floor (twin/floors.py) and hands the catalog its texts."""
from __future__ import annotations

import sys

from twin.i18n import terms
from twin.cli.texts import template
from twin.i18n.catalog import problems, update


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["update"]:
        for lang, n in update(template()).items():
            print(f"{lang}: {n} untranslated")
        return 0
    if argv in (["check"], ["terms"]):
        tmpl = template()
        found = (problems(tmpl) if argv == ["check"] else []) + [str(h) for h in terms.problems(tmpl)]
        print("\n".join(found) or ("catalogs complete, " if argv == ["check"] else "") + "one term per concept")
        return 1 if found else 0
    print("usage: python -m twin.i18n update | check | terms", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
