"""The sans-I/O boundary of ahp.vt, made executable (style guideline 1).

Test rules:
- Imports happen in a fresh interpreter, so modules other tests imported cannot
  hide (or fake) a dependency.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("trio", "os", "socket", "fcntl")
VT_MODULES = (
    "ahp.vt",
    "ahp.vt.events",
    "ahp.vt.integration",
    "ahp.vt.queries",
    "ahp.vt.scanner",
)

PROBE = """
import importlib, json, sys, types
before = set(sys.modules)
mods = [importlib.import_module(name) for name in %r]
loaded = sorted(set(sys.modules) - before)
bad_globals = {
    m.__name__: sorted(
        name for name, value in vars(m).items()
        if name in %r or (isinstance(value, types.ModuleType) and value.__name__ in %r)
    )
    for m in mods
}
print(json.dumps({"loaded": loaded, "globals": bad_globals}))
"""


def test_vt_imports_no_io_modules() -> None:
    root = Path(__file__).resolve().parents[1]
    code = PROBE % (VT_MODULES, FORBIDDEN, FORBIDDEN)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    report = json.loads(result.stdout)
    # `os` is always loaded by the interpreter itself, so sys.modules can only
    # speak for the others; module globals speak for all four.
    assert not [m for m in report["loaded"] if m.split(".")[0] in FORBIDDEN]
    assert report["globals"] == {name: [] for name in VT_MODULES}
