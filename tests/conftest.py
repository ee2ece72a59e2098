"""Make the project's plugins and tools importable by the tests."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT / "scripts", ROOT / "plugins" / "modules", ROOT / "roles" / "preflight" / "filter_plugins", ROOT / "roles" / "ssh_mesh" / "filter_plugins"):
    sys.path.insert(0, str(path))
