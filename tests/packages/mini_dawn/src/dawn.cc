// The whole of mini_dawn: one function that says which build of it is in the process.
#include "webgpu/webgpu.h"

#include "mini_dawn_gen.h"
#include "spirv_headers/mini.h"
#if defined(__linux__)
#include "spirv_tools/mini.h"
#include "vulkan_headers/mini.h"
#include "vulkan_utility_libraries/mini.h"
#endif

// onnxruntime's cmake/patches/dawn/ patch turns this on; a tree without it does not compile.
#define MINI_DAWN_ORT_PATCHED 0
static_assert(MINI_DAWN_ORT_PATCHED, "onnxruntime's Dawn patch was not applied to this Dawn tree");
static_assert(sizeof(MINI_DAWN_GENERATED_WITH) > 1, "the code generator wrote nothing");

extern "C" const char* wgpuMiniDawnDescription(void) {
#if defined(MINI_DAWN_SHARED)
  return "mini_dawn 1.0 (shared)";
#else
  return "mini_dawn 1.0 (static)";
#endif
}

#include <sstream>

// Formats through the C++ runtime's locale machinery, as real Dawn does, so a statically linked
// runtime brings its unique symbols (locale ids, guard variables) into the library.
extern "C" int wgpuMiniDawnFormattedLength(int value) {
  std::ostringstream out;
  out << value;
  return static_cast<int>(out.str().size());
}
