// mini_dawn's public API: enough for the tests to see which Dawn a library carries.
#pragma once

#if defined(MINI_DAWN_SHARED)
#if defined(_WIN32)
#if defined(MINI_DAWN_BUILDING_SHARED)
#define MINI_DAWN_EXPORT __declspec(dllexport)
#else
#define MINI_DAWN_EXPORT __declspec(dllimport)
#endif
#else
#define MINI_DAWN_EXPORT __attribute__((visibility("default")))
#endif
#else
#define MINI_DAWN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

// "mini_dawn <version> (shared|static)".
MINI_DAWN_EXPORT const char* wgpuMiniDawnDescription(void);

#ifdef __cplusplus
}
#endif
