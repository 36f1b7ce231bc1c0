"""The floors of the house, declared once: every package of twin/ stands on one, and a module imports
only from its own floor and the floors below. tests/test_import_graph.py checks every import against
this, and the architecture page draws it (docs/hooks/floors.py). The pages and the Dash shell stand on
the serve/ui floor; a package's `__main__` is a command, so it stands on the command line's floor."""
from __future__ import annotations

FLOORS: tuple[tuple[str, ...], ...] = (
    ("i18n",),                                  # translation machinery: handed its texts, imports none of twin
    ("model",),                                 # the typed catalog, settings, shared rules, memory geometry
    ("topology",),
    ("predict",),                               # time predictors
    ("workload",),
    ("engine",),                                # handed a resolved workload
    ("explore", "cloud", "region", "lessons"),  # what the engine's runs are used for
    ("live",),                                  # the live service
    ("serve", "ui", "pages", "app"),            # the doors: the API, the dashboard's parts, pages and shell
    ("cli",),                                   # commands, tools and checks that drive everything below
)
CLI = len(FLOORS) - 1
_FLOOR = {pkg: i for i, floor in enumerate(FLOORS) for pkg in floor}


def floor_of(module: str) -> int:
    """The floor of a module ("twin.engine.core", "pages.cloud", "app"); KeyError names an unplaced one."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return CLI
    if parts[0] == "twin":
        if len(parts) == 1 or parts[1] == "floors":
            return 0                            # the package root and this declaration import nothing
        return _FLOOR[parts[1]]
    return _FLOOR[parts[0]]
