#!/usr/bin/env bash
# Linux (Debian, Ubuntu) only: everything `nox -s test` needs from the system: git, a C++ toolchain,
# cmake and ninja for the miniature-upstream builds, Redis for the shared compiler-cache test,
# bubblewrap for the sccache-dist build server of the distributed-compile test (which runs as root),
# and Mesa's lavapipe (ci/lavapipe.sh) so the WebGPU lanes run without a GPU. Run as root (a fresh
# Debian has no sudo) or through sudo:
#   bash ci/install-system-deps.sh         # as root
#   sudo bash ci/install-system-deps.sh    # as a user with sudo
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  ca-certificates git g++ cmake ninja-build ccache redis-server bubblewrap patchelf unzip

bash "$(dirname "$0")/lavapipe.sh"
