// mini_ort's C API: a handful of functions the Python loader and the tests call.
#pragma once

#if defined(_WIN32)
#if defined(ORT_MINI_BUILDING_LIBRARY)
#define ORT_MINI_EXPORT __declspec(dllexport)
#else
#define ORT_MINI_EXPORT __declspec(dllimport)
#endif
#else
#define ORT_MINI_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

// The version from VERSION_NUMBER, e.g. "1.31.0".
ORT_MINI_EXPORT const char* OrtMiniGetVersionString(void);

// Comma-separated execution providers compiled in, the preferred one first.
ORT_MINI_EXPORT const char* OrtMiniGetAvailableProviders(void);

// A checksum computed with the deps.txt dependency, proving it was fetched and compiled in.
ORT_MINI_EXPORT int OrtMiniDependencyChecksum(void);

// Packed size in bytes of a K x N block-quantized weight with `bits` per element (0 when invalid).
ORT_MINI_EXPORT long long OrtMiniMatMulNBitsPackedSize(long long k, long long n, int bits, int block_size);

#ifdef __cplusplus
}
#endif
