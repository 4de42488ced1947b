"""mini_dawn's stand-in for Dawn's clone script: it clones nothing, it leaves a mark that it ran."""

import argparse
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--directory", type=Path, required=True)
args = parser.parse_args()
(args.directory / "FETCH_DEPENDENCIES_RAN").write_text("Dawn's clone script ran\n", encoding="utf-8")
