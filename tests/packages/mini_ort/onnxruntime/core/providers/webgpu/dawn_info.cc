// The built-in WebGPU EP reports which Dawn it was linked with.
#include "core/session/onnxruntime_c_api.h"
#include "webgpu/webgpu.h"

extern "C" ORT_MINI_EXPORT const char* OrtMiniWebGpuDawn(void) { return wgpuMiniDawnDescription(); }
