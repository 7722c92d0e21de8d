"""Every Python snippet in the README runs as written (users copy them verbatim)."""
import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
SNIPPETS = re.findall(r"```python\n(.*?)```", open(README).read(), re.S)


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index):
    out = subprocess.run([sys.executable, "-c", SNIPPETS[index]], capture_output=True, text=True, timeout=120,
                         cwd="/")
    assert out.returncode == 0, out.stderr
