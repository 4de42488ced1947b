"""Stage 2, the patch series: patch files checked and applied to a prepared tree, exported, refreshed."""
