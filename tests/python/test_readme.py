"""The README's Python example runs as written (from the repository root)."""

import os
import re

from conftest import REPO


def test_readme_python_example():
    text = (REPO / "README.md").read_text()
    section = text.split("## Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
