# mini_ort's abseil: a header-only stand-in with the target name onnxruntime's abseil gives, which
# Dawn's third_party/CMakeLists.txt checks (NOT TARGET absl::strings) before adding its own copy.
if (NOT TARGET absl::strings)
  add_library(mini_absl_strings INTERFACE)
  add_library(absl::strings ALIAS mini_absl_strings)
endif()
