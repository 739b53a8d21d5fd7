"""README "Steering compaction": its config example is loaded by a real daemon and does what
the text says (the Anthropic override compacts at 80%, the kept block holds the first request
and the latest todo list)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from wire import stored

from .conftest import Spawner
from .test_steering import BIG, summary_text, turn

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_config() -> dict[str, Any]:
    section = README.read_text().split("## Steering compaction", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert found is not None, "README's Steering compaction section has no JSON example"
    config: dict[str, Any] = json.loads(found.group(1))
    return config


async def test_the_readme_example_runs(spawner: Spawner, tmp_path: Path) -> None:
    example = readme_config()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(example))
    c = await spawner(extra_args=["--config", str(path)])
    effective = (await c.request("config/get", {}))["compaction"]
    assert effective["triggerTokens"] == example["compaction"]["triggerTokens"]
    assert effective["overrides"][0]["match"] == {"model": "anthropic/*", "agent": None}
    assert effective["keep"]["todoTools"] == ["todowrite", "TodoWrite"]
    sid = (await c.create_session()).id
    await turn(c, sid, "FIRST: port the parser")
    await turn(c, sid, "plan it" + BIG, tool="todowrite", output="[ ] lexer\n[ ] parser")
    # 140k of claude-sonnet-4-5's usable 168k: over the override's 80%, under triggerTokens.
    await turn(c, sid, "go", used=140_000)
    await c.request("session/idle", {"sessionID": sid})
    records = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert len(records) == 1 and records[0]["auto"] is True
    text = await summary_text(c, sid, records[0]["messageID"])
    kept = text[text.index("## Kept verbatim") :]
    assert "### First request\nFIRST: port the parser" in kept
    assert "### Todo list (todowrite)\n[ ] lexer\n[ ] parser" in kept
    page = await stored(c, sid)
    assert page.messages[-1].info["id"] == records[0]["continueID"]
