"""The peer's ``drive_sidecar.py``, reading each step's window as a frontend that keeps it does:
``session/context`` with ``since`` (the last reply's ``revision``), the delta applied on the
client (keep the first ``start`` messages, append the rest), as the OpenCode plugin and the
clients' ``ContextWindow`` do. Like the plugin it declares ``capabilities.echo`` false: its own
writes are answered, not echoed back (the daemon's own messages and events still come). The
driver still sees the whole window, so its step-by-step comparison with OpenCode's own requests
checks the assembly too.

    python bench/_since_driver.py PEER_DIR [drive_sidecar.py's arguments]
"""

from __future__ import annotations

import sys
from typing import Any

peer = sys.argv.pop(1)
sys.path.insert(0, peer)
import drive_sidecar  # type: ignore[import-not-found]  # noqa: E402

_request = drive_sidecar.Sidecar.request
# (session, format) -> (revision, the assembled window)
_windows: dict[tuple[str, str], tuple[str, list[Any]]] = {}


def request(self: Any, method: str, params: Any = None, timeout: float = 120.0) -> Any:
    if method == "initialize":
        params = {**params, "capabilities": {**params.get("capabilities", {}), "echo": False}}
    if method != "session/context" or not isinstance(params, dict) or "since" in params:
        return _request(self, method, params, timeout)
    key = (params["sessionID"], params.get("format", "parts"))
    kept = _windows.get(key)
    asked = dict(params, since=kept[0]) if kept is not None else params
    result = _request(self, method, asked, timeout)
    if result.get("delta") and kept is not None:
        messages = kept[1][: result["start"]] + result["messages"]
    else:
        messages = result["messages"]
    _windows[key] = (result["revision"], messages)
    return {**result, "messages": list(messages), "delta": None, "start": None}


drive_sidecar.Sidecar.request = request
sys.argv[0] = drive_sidecar.__file__
drive_sidecar.main()
