"""Tests for an installed onnxruntime wheel, stock or built by ortstack.

Run from outside the repository: ``python -m pytest -p wheel_tests.plugin --pyargs wheel_tests --ep all``.
Every session disables the CPU fallback and checks it runs on the execution provider asked for.
"""
