"""`python -m twin faults --kinds [--json]`: every fault kind the twin knows, with its targets and
fields, read from the registry (`twin.engine.faults.kinds`), so a fault file's author sees what a
kind accepts without reading code."""
from __future__ import annotations

from twin.cli.args import dumps
from twin.engine.faults import KINDS, defaults


def kinds_listing() -> list[dict]:
    """Each kind's declaration, with its random-failure rate from the catalog where it has one."""
    cat = defaults()
    rates = {**cat["mtbf_hours"], **{k: v["mtbf_hours"] for k, v in cat.get("gray", {}).items()}}
    return [{**k.as_dict(), "mtbf_hours": rates.get(name)} for name, k in KINDS.items()]


def cmd_faults(a) -> int:
    rows = kinds_listing()
    if a.json:
        print(dumps(rows))
        return 0
    for r in rows:
        fields = ", ".join(f"{f['name']} ({f['allowed']})" for f in r["fields"]) or "-"
        print(f"{r['name']:<16}{'gray' if r['gray'] else 'stop':<6}{' or '.join(r['targets']):<14}"
              f"e.g. {r['example']:<22}detect {r['detect']:<10}fields: {fields}")
        print(f"{'':<16}{r['help']}")
    return 0


def add_faults_command(sub) -> None:
    f = sub.add_parser("faults", help="the fault kinds a fault file may use (--kinds), from the registry")
    f.add_argument("--kinds", action="store_true", required=True,
                   help="list every fault kind: its targets, fields with their bounds, and how it is detected")
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(fn=cmd_faults)
