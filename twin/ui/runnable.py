"""Which scenario a deployment can run on. A scenario with the full pipeline needs a prefill pool;
some catalog deployments have none (DeepSeek's H800 rows model the decode unit, prefill is
predicted on its own), so choosing one on the default scenario would only earn a refusal. The
control bar moves such a choice to a scenario that runs it, and says so."""
from __future__ import annotations

from twin.model.config import catalog
from twin.engine import list_scenarios
from twin.engine.scenario import load_scenario

from twin.ui.lang import N_, _

# what the pages say where a decode-only scenario has nothing to show (input, prefill, cache)
NO_PREFILL = N_("none: scenario %(scenario)s is decode-only (prompts prefilled outside the run), so no prefill "
                "and no cache lookups")


def fit(scenario: str, deployment: str | None) -> tuple[str, str | None]:
    """(the scenario to run, a note saying why it changed, or None when `scenario` runs as chosen).
    Unknown names pass through unchanged: the reset names what is wrong with them."""
    dep = catalog().deployments.get(deployment or "")
    if dep is None or dep.prefill.instances > 0 or _pipeline(scenario) != "full":
        return scenario, None
    other = next((s["name"] for s in list_scenarios() if _pipeline(s["name"]) == "decode_only"), None)
    if other is None:
        return scenario, None
    return other, _("%(dep)s has no prefill pool: switched to scenario %(scenario)s") % {
        "dep": deployment, "scenario": other}


def _pipeline(scenario: str) -> str | None:
    try:
        return load_scenario(scenario).pipeline
    except ValueError:
        return None


def decode_only(scenario: str) -> bool:
    """True for a scenario whose KV arrives as if prefilled elsewhere: nothing to show for prefill or cache."""
    return _pipeline(scenario) == "decode_only"
