"""Where the suites' processes import ortstack, wheel_tests and wheel_bench from (their ``PYTHONPATH``).

From a checkout (an editable install) that is ``python/``. An installed ortstack has them in
site-packages beside every other package, which must not leak into the suites' venvs (another
numpy, another onnxruntime): there a folder in the cache holds links to just these three.
"""

from __future__ import annotations

import os
from pathlib import Path

import ortstack

SUITE_PACKAGES = ("ortstack", "wheel_tests", "wheel_bench")


def suite_pythonpath(cache_dir: Path) -> Path:
    """A folder holding exactly the suites' packages, for ``PYTHONPATH``."""
    parent = Path(ortstack.__file__).resolve().parent.parent
    if (parent / "pyproject.toml").is_file():  # python/ of a checkout: nothing else lives there
        return parent
    linked = cache_dir / "suite-packages"
    linked.mkdir(parents=True, exist_ok=True)
    for name in SUITE_PACKAGES:
        link = linked / name
        if not (link.is_symlink() and link.resolve() == (parent / name).resolve()):
            staged = linked / f".{name}.{os.getpid()}.tmp"  # runs sharing the cache swap it in whole
            staged.unlink(missing_ok=True)
            staged.symlink_to(parent / name, target_is_directory=True)
            staged.replace(link)
    return linked
