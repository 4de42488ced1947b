// Stand-in for a block-quantized matmul kernel: only the packed-size arithmetic, which patches
// in the tests change (for example to accept an empty weight).
#include "core/session/onnxruntime_c_api.h"

namespace {

constexpr long long CeilDiv(long long a, long long b) { return (a + b - 1) / b; }

}  // namespace

extern "C" long long OrtMiniMatMulNBitsPackedSize(long long k, long long n, int bits, int block_size) {
  if (k <= 0 || n <= 0) {
    return 0;
  }
  if (bits < 2 || bits > 8 || block_size < 16) {
    return 0;
  }
  const long long blocks_per_column = CeilDiv(k, block_size);
  const long long bytes_per_block = CeilDiv(static_cast<long long>(block_size) * bits, 8);
  return n * blocks_per_column * bytes_per_block;
}
