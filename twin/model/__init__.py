"""The domain model: the typed catalog, the run settings and the rules every part shares."""
