"""Where the tests find the project's `dualpath` binary (services and store processes they start):
$DUALPATH_BIN, else $DUALPATH_BINARY_DIR/dualpath, else the newest of
build/{dev,release,debug}/bin/dualpath. None when there is none (the tests then skip)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dualpath_binary() -> str | None:
    env = os.environ.get("DUALPATH_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    bin_dir = os.environ.get("DUALPATH_BINARY_DIR")
    if bin_dir and os.access(os.path.join(bin_dir, "dualpath"), os.X_OK):
        return os.path.join(bin_dir, "dualpath")
    candidates = (REPO / "build" / b / "bin" / "dualpath" for b in ("dev", "release", "debug"))
    found = [p for p in candidates if os.access(p, os.X_OK)]
    return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None
