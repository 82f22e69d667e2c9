"""The README's host example runs as written (from the repository root)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_host_example_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "sampling=sampling" in b]
    assert len(blocks) == 1
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert '{"text": "my LLM on: tell me about otters", "model": "my-llm"}' in lines[0]
    assert lines[1:] == ["progress 1/3", "progress 2/3", "progress 3/3"]
