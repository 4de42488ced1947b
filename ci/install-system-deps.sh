#!/usr/bin/env bash
# Linux (Debian, Ubuntu) only: the system packages ortstack's own tests need: git, a C++ toolchain,
# cmake and ninja for the miniature-upstream builds, patchelf for auditwheel, Redis for the shared
# compiler-cache test. WebGPU without a GPU is ci/lavapipe.sh's job. Run as root.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  ca-certificates git g++ cmake ninja-build ccache redis-server patchelf unzip
