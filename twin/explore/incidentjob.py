"""The what-if of a fault demo as a background job (`twin.live.jobs`), so the Failures page's incident
report can say what a slow part cost on the live twin too: the demo's own run to its end, then the
same seed without the fault and without its mitigation (`incident.whatif`, as `python -m twin run`
does). The live twin's numbers are the demo's only while it replays the demo untouched (the page
says so); the job never touches the live twin."""
from __future__ import annotations

from twin.engine import Engine
from twin.engine.faults import load_fault_file
from twin.engine.scenario import load_scenario
from twin.explore import incident
from twin.explore.sweepjobs import BUILD_S, PER_REQUEST_S, PER_SIM_S

RUNS = 3        # the run itself, without the fault, without the mitigation


def step_s(eng: Engine, duration_s: float) -> float:
    """The run's step, as the command line takes it (`twin.cli.run`)."""
    return max(eng.scenario.interval_s, min(60.0, duration_s / 20))


def cost_s(duration_s: float, rate_rps: float) -> float:
    """Estimated CPU seconds of the job (the job pool's budget): RUNS runs of the demo."""
    return RUNS * (BUILD_S + duration_s * (PER_SIM_S + rate_rps * PER_REQUEST_S))


def whatif_job(faults: str, progress) -> dict[str, dict]:
    """Run in a job process: {fault id (text): its what-if} for the gray faults of the fault file."""
    spec = load_fault_file(faults)
    eng = Engine(load_scenario(spec.get("scenario") or "default", seed=spec.get("seed"),
                               duration_s=spec.get("duration_s"), faults=spec["path"]))
    step = step_s(eng, eng.scenario.duration_s)
    eng.run(eng.scenario.duration_s, step=step)
    progress(1)
    out = incident.whatif(eng, step)
    progress(RUNS)
    return {str(k): v for k, v in out.items()}
