"""mini_dawn's code generator: like Dawn's generator_lib.py, it imports Jinja2 and MarkupSafe from
the parent folder of --jinja2-path / --markupsafe-path, then writes one generated header."""

import argparse
import importlib
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--output", type=Path, required=True)
parser.add_argument("--jinja2-path", type=Path)
parser.add_argument("--markupsafe-path", type=Path)
args = parser.parse_args()
for path in (args.jinja2_path, args.markupsafe_path):
    if path:
        sys.path.insert(1, str(path.parent))
loaded = [importlib.import_module(name).__name__ for name in ("jinja2", "markupsafe")]
args.output.parent.mkdir(parents=True, exist_ok=True)
args.output.write_text(f'#define MINI_DAWN_GENERATED_WITH "{" ".join(loaded)}"\n', encoding="utf-8")
