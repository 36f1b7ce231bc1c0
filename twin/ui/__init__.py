"""Figure and component builders for the dashboard (no simulation logic).

Everything here is a pure function of a Snapshot (or of the perf model / validation tables), so it
is testable without a browser. Pages import these; the simulation package never imports this one.
"""
