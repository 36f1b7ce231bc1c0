"""Rows cached on disk, one small Parquet file per task key (a hash of the full config and the
twin's code), so a repeated point costs a file read and concurrent sweeps never write one file.

The folder is TWIN_SWEEP_CACHE, else ~/.cache/cloudmatrix-twin/sweep.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def default_dir() -> Path:
    return Path(os.environ.get("TWIN_SWEEP_CACHE") or Path.home() / ".cache" / "cloudmatrix-twin" / "sweep")


def _plain(v):
    """Parquet gives numpy scalars; rows hold plain Python values (a one-row file keeps None)."""
    return v.item() if hasattr(v, "item") else v


class Cache:
    def __init__(self, folder: str | Path | None = None):
        self.dir = Path(folder) if folder else default_dir()

    def _path(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"cache key {key!r}: allowed letters and digits")
        return self.dir / f"{key}.parquet"

    def get(self, key: str) -> dict | None:
        import pandas as pd            # here, not at the top: `python -m twin bench` need not load it
        p = self._path(key)
        try:
            df = pd.read_parquet(p)
        except (FileNotFoundError, OSError, ValueError):   # absent, or a torn file: recompute
            return None
        return {k: _plain(v) for k, v in df.iloc[0].items()} if len(df) == 1 else None

    def put(self, row: dict) -> None:
        import pandas as pd
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
        os.close(fd)
        try:
            pd.DataFrame([row]).to_parquet(tmp, index=False)
            os.replace(tmp, self._path(row["key"]))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
