// Stand-in for a WebGPU attention kernel: it builds a tiny shader source string.
#include <string>

namespace mini_ort::webgpu {

std::string PagedAttentionShader(int head_size) {
  std::string shader = "// paged attention\n";
  shader += "const head_size : u32 = " + std::to_string(head_size) + "u;\n";
  shader += "fn score(q : f32, k : f32) -> f32 { return q * k; }\n";
  return shader;
}

}  // namespace mini_ort::webgpu
