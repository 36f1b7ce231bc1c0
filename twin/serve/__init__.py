"""`python -m twin serve`: an OpenAI-compatible HTTP API and Prometheus metrics backed by a live twin.

prompt.py turns request text into the twin's request (length, prefix blocks, output length);
live.py drives an engine at real time and streams each request's tokens at the twin's times;
api.py is the Starlette app; guard.py its connection budgets (below the app, in uvicorn's protocol);
metrics.py the Prometheus exporter; replay.py the outside client.
"""
