#!/usr/bin/env bash
# Linux only (Debian, Ubuntu): install lavapipe, Mesa's software Vulkan driver, so the WebGPU
# execution provider (Dawn -> Vulkan) runs on a machine without a GPU.
#
# Bookworm's own Mesa 22.3 is rejected by Dawn (it lacks shaderUniform*ArrayDynamicIndexing);
# bookworm-backports carries Mesa 25, which works; newer distributions' own Mesa works too.
#
# Usage:  sudo bash ci/lavapipe.sh   (or as root; it calls sudo itself when needed)
# Nothing needs exporting afterwards: where lavapipe is the only Vulkan driver, `ortstack test` and
# `ortstack bench` point WebGPU at it themselves (VK_DRIVER_FILES, the plugin EP's
# ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1, a persistent Mesa shader cache under the ortstack cache).
# Other programs that should use it: the lines printed at the end say what to export.
set -euo pipefail

if [[ "$(uname -s)" != Linux ]]; then
  echo "ci/lavapipe.sh: Linux only; on this system WebGPU needs a real GPU driver" >&2
  exit 2
fi
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  SUDO=(sudo)
fi
install() {
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2
}

ICD=/usr/share/vulkan/icd.d/lvp_icd.json
if grep -q 'VERSION_CODENAME=bookworm' /etc/os-release; then
  if [[ ! -f "$ICD" ]] || ! dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -q '~bpo12'; then
    # Backports from the same Debian mirror the machine already uses.
    mirror=$({ grep -rhoE '(URIs:|^deb)[[:space:]]+[^[:space:]]+/debian/?([[:space:]]|$)' \
      /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null || true; } | awk 'NR == 1 {print $2}')
    if [[ -z "$mirror" ]]; then
      echo "ci/lavapipe.sh: no Debian mirror found in the apt sources to take bookworm-backports from" >&2
      exit 2
    fi
    echo "deb $mirror bookworm-backports main" \
      | "${SUDO[@]}" tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    "${SUDO[@]}" apt-get update -qq >&2
    install -t bookworm-backports mesa-vulkan-drivers libvulkan1
  fi
elif [[ ! -f "$ICD" ]]; then
  # Newer Debian and Ubuntu 24.04+ ship a Mesa that Dawn accepts (24 or newer).
  "${SUDO[@]}" apt-get update -qq >&2
  install mesa-vulkan-drivers libvulkan1
fi
mesa_major=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers | sed -E 's/^([0-9]+:)?([0-9]+).*/\2/')
if (( mesa_major < 24 )); then
  echo "ci/lavapipe.sh: Mesa $mesa_major is too old for Dawn (it needs 24 or newer)" >&2
  exit 2
fi

echo "ci/lavapipe.sh: Mesa $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers) lavapipe at $ICD;" \
  "ortstack test and bench use it as it is. Other programs: export VK_DRIVER_FILES=$ICD" \
  "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1"
