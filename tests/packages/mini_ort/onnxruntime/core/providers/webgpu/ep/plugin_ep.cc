// Entry points of mini_ort's WebGPU plugin EP library (the onnxruntime_providers_webgpu shape).
#include <string>

#include "webgpu/webgpu.h"

#if defined(_WIN32)
#define ORT_MINI_PLUGIN_EXPORT __declspec(dllexport)
#else
#define ORT_MINI_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

namespace mini_ort::webgpu {
std::string PagedAttentionShader(int head_size);
}  // namespace mini_ort::webgpu

extern "C" {

// The entry points onnxruntime's RegisterExecutionProviderLibrary looks up (stand-ins here).
ORT_MINI_PLUGIN_EXPORT void* CreateEpFactories(const char*, const void*, const void*, void**, unsigned long, unsigned long*) {
  return nullptr;
}

ORT_MINI_PLUGIN_EXPORT void* ReleaseEpFactory(void*) { return nullptr; }

ORT_MINI_PLUGIN_EXPORT const char* OrtMiniPluginEpName(void) { return "WebGpuExecutionProvider"; }

ORT_MINI_PLUGIN_EXPORT const char* OrtMiniPluginVersion(void) { return ORT_VERSION; }

ORT_MINI_PLUGIN_EXPORT const char* OrtMiniPluginDawn(void) { return wgpuMiniDawnDescription(); }

ORT_MINI_PLUGIN_EXPORT int OrtMiniPluginShaderSize(int head_size) {
  return static_cast<int>(mini_ort::webgpu::PagedAttentionShader(head_size).size());
}

}  // extern "C"
