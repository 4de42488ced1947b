// Entry points of the mini_ort shared library.
#include "core/session/onnxruntime_c_api.h"

#include <mini_dep/checksum.h>

#include <string>

namespace {

std::string ProviderList() {
  std::string providers;
#if defined(USE_WEBGPU)
  providers += "WebGpuExecutionProvider,";
#endif
  providers += "CPUExecutionProvider";
  return providers;
}

}  // namespace

extern "C" {

const char* OrtMiniGetVersionString(void) { return ORT_VERSION; }

const char* OrtMiniGetAvailableProviders(void) {
  static const std::string providers = ProviderList();
  return providers.c_str();
}

int OrtMiniDependencyChecksum(void) {
  static const unsigned char kText[] = "mini_ort";
  return mini_dep::Fletcher16(kText, sizeof(kText) - 1);
}

}  // extern "C"
