"""Stage 1, the sources: the onnxruntime tree at its pin, the deps.txt dependencies it builds, Dawn and its
third-party folders, and what the tree's cmake reads."""
