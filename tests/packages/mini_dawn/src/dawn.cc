// The whole of mini_dawn: one function that says which build of it is in the process.
#include "webgpu/webgpu.h"

extern "C" const char* wgpuMiniDawnDescription(void) {
#if defined(MINI_DAWN_SHARED)
  return "mini_dawn 1.0 (shared)";
#else
  return "mini_dawn 1.0 (static)";
#endif
}
