"""Tables are data on stdout (they pipe), logs and errors on stderr; a table fits 80 columns whole."""

from __future__ import annotations

import subprocess
import sys

from conftest import PYTHON_SRC

# A plan of onnxruntime 1.21: option names and mirror paths longer than a third of 80 columns.
ROWS = [
    ["option", "onnxruntime_BUILD_DAWN_MONOLITHIC_LIBRARY", "OFF (read by cmake/CMakeLists.txt)"],
    ["not read by this tree", "onnxruntime_USE_EP_API_ADAPTERS", "ON: left out, the tree does not read it"],
    ["dependency", "abseil_cpp", "mirror /home/someone/.cache/ortstack/deps-mirror/abseil/20240722.0.zip"],
]
SCRIPT = f"from ortstack import log; log.table('plan of webgpu', ['what', 'name', 'value'], {ROWS!r}); log.info('done')"


def test_a_table_wider_than_80_columns_keeps_every_column_and_goes_to_stdout(base_env: dict[str, str]) -> None:
    env = {**base_env, "PYTHONPATH": str(PYTHON_SRC), "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    header = next(line for line in lines if "│" in line)
    assert [cell.strip() for cell in header.split("│")] == ["what", "name", "value"]
    firsts = " ".join(line.split("│")[0].strip() for line in lines if "│" in line)
    for what in ("option", "not read by this tree", "dependency"):
        assert what in " ".join(firsts.split()), firsts  # the first column is there, wrapped between words
    assert "│" not in done.stderr
    assert done.stderr.strip() == "done"
