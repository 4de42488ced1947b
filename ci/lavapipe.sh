#!/usr/bin/env bash
# Linux only (Debian bookworm): install lavapipe, Mesa's software Vulkan driver, so the WebGPU
# execution provider (Dawn -> Vulkan) runs on a machine without a GPU.
#
# Bookworm's own Mesa 22.3 is rejected by Dawn (it lacks shaderUniform*ArrayDynamicIndexing);
# bookworm-backports carries Mesa 25, which works.
#
# Usage:  ci/lavapipe.sh            installs (as root or through sudo), then prints the environment
#         eval "$(ci/lavapipe.sh)"  installs and exports the environment into the current shell
# MESA_SHADER_CACHE_DIR (default: ~/.cache/ortstack/mesa-shaders) is where Mesa keeps compiled
# shaders; persist it between CI runs: cold shader compilation dominates WebGPU tests on lavapipe.
set -euo pipefail

if [[ "$(uname -s)" != Linux ]]; then
  echo "ci/lavapipe.sh: Linux only; on this system WebGPU needs a real GPU driver" >&2
  exit 2
fi
if ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "ci/lavapipe.sh: written for Debian bookworm; install Mesa >= 24 with lavapipe by other means" >&2
  exit 2
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  SUDO=(sudo)
fi

ICD=/usr/share/vulkan/icd.d/lvp_icd.json
if [[ ! -f "$ICD" ]] || ! dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -q '~bpo12'; then
  echo 'deb http://deb.debian.org/debian bookworm-backports main' \
    | "${SUDO[@]}" tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
  "${SUDO[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    -t bookworm-backports mesa-vulkan-drivers libvulkan1 >&2
fi

SHADER_CACHE="${MESA_SHADER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ortstack/mesa-shaders}"
mkdir -p "$SHADER_CACHE"
echo "ci/lavapipe.sh: Mesa $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers), shader cache $SHADER_CACHE" >&2

# What to export: the driver to load, the plugin EP's opt-in to a software adapter, the shader cache.
cat <<ENV
export VK_DRIVER_FILES=$ICD
export ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1
export MESA_SHADER_CACHE_DIR=$SHADER_CACHE
export MESA_SHADER_CACHE_MAX_SIZE=1G
ENV
