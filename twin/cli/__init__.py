"""The command line and the tools run from it (`python -m twin ...`, benchmarks, load checks)."""
