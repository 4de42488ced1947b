"""Stage 3, the build: variant options, the toolchain and compiler cache, the CMake build through
scikit-build-core, and the wheel it makes."""
