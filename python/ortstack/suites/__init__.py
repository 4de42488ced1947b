"""Stages 4 and 5, the proof: the wheel test suites and the benchmarks, each in fresh venvs."""
