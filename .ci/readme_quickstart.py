"""Print the README's quick-start commands, one per line (what .ci/run executes).

The quick start is the first ```bash block under the "## Quick start" heading; it must
hold exactly two commands (install + main job, install test extras + tests). Reading
them from the README, not copying them, keeps CI and the README from drifting apart.
"""
import re
import sys
from pathlib import Path

readme = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md").read_text(encoding="utf-8")
section = re.search(r"^## Quick start.*?$(.*?)^## ", readme, re.S | re.M)
if not section:
    sys.exit("README.md: no '## Quick start' section")
block = re.search(r"```(?:bash|sh)\n(.*?)```", section.group(1), re.S)
if not block:
    sys.exit("README.md: the quick start has no ```bash block")
commands = [line.strip() for line in block.group(1).splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
if len(commands) != 2:
    sys.exit(f"README.md: the quick start must hold exactly two commands, found {len(commands)}")
if "provision --goal cost --rps 70" not in commands[0] or "pytest" not in commands[1]:
    sys.exit("README.md: quick start must be (1) install + `provision --goal cost --rps 70`, (2) test extras + pytest")
print("\n".join(commands))
