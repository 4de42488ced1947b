// A header-only dependency of mini_ort, served to cmake as a zip archive by the test server.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mini_dep {

constexpr int kVersion = 10;

// Fletcher-16 over a byte buffer: enough work to prove the header was found and compiled.
constexpr std::uint16_t Fletcher16(const unsigned char* data, std::size_t size) {
  std::uint16_t low = 0;
  std::uint16_t high = 0;
  for (std::size_t i = 0; i < size; ++i) {
    low = static_cast<std::uint16_t>((low + data[i]) % 255);
    high = static_cast<std::uint16_t>((high + low) % 255);
  }
  return static_cast<std::uint16_t>((high << 8) | low);
}

}  // namespace mini_dep
