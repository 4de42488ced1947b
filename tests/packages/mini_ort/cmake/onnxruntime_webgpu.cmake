# mini_ort's WebGPU switches, shaped like onnxruntime's: the built-in EP inside the onnxruntime
# library, or (onnxruntime_USE_EP_API_ADAPTERS) the plugin EP library onnxruntime_providers_webgpu;
# Dawn (here mini_dawn, from deps.txt) linked statically or as the shared libwebgpu_dawn.
option(onnxruntime_USE_EP_API_ADAPTERS "Build the WebGPU EP as a plugin EP library" OFF)
option(onnxruntime_BUILD_DAWN_SHARED_LIBRARY "Build Dawn as the shared library webgpu_dawn" OFF)
option(onnxruntime_USE_EXTERNAL_DAWN "Use a Dawn provided by the system" OFF)
set(onnxruntime_CUSTOM_DAWN_SRC_PATH "" CACHE PATH "A complete Dawn source tree to build instead of the deps.txt archive")
option(onnxruntime_ENABLE_DAWN_BACKEND_VULKAN "Enable Vulkan backend for Dawn (on Windows)" OFF)

if(onnxruntime_BUILD_DAWN_SHARED_LIBRARY)
  # As in onnxruntime: the plugin EP carries its Dawn inside; only the built-in EP may share one.
  if(NOT onnxruntime_USE_EP_API_ADAPTERS)
    add_compile_definitions(BUILD_DAWN_SHARED_LIBRARY=1)
  else()
    message(FATAL_ERROR "the plugin EP (onnxruntime_USE_EP_API_ADAPTERS) cannot use a shared Dawn (onnxruntime_BUILD_DAWN_SHARED_LIBRARY)")
  endif()
  if(onnxruntime_USE_EXTERNAL_DAWN)
    message(FATAL_ERROR "onnxruntime_USE_EXTERNAL_DAWN and onnxruntime_BUILD_DAWN_SHARED_LIBRARY cannot be enabled at the same time.")
  endif()
endif()

if(onnxruntime_USE_EXTERNAL_DAWN)
  find_package(dawn REQUIRED)
else()
  include("${CMAKE_CURRENT_SOURCE_DIR}/external/onnxruntime_external_deps.cmake")
endif()

if(onnxruntime_BUILD_DAWN_SHARED_LIBRARY)
  set(onnxruntime_dawn_libs dawn::webgpu_dawn)
else()
  set(onnxruntime_dawn_libs dawn::dawn_native dawn::dawn_proc)
endif()

set(onnxruntime_webgpu_srcs "${ONNXRUNTIME_ROOT}/contrib_ops/webgpu/bert/paged_attention.cc")
if(onnxruntime_USE_EP_API_ADAPTERS)
  add_library(onnxruntime_providers_webgpu SHARED
    "${ONNXRUNTIME_ROOT}/core/providers/webgpu/ep/plugin_ep.cc" ${onnxruntime_webgpu_srcs})
  target_include_directories(onnxruntime_providers_webgpu PRIVATE "${ONNXRUNTIME_INCLUDE_DIR}" "${ONNXRUNTIME_ROOT}")
  target_compile_definitions(onnxruntime_providers_webgpu PRIVATE ORT_VERSION="${ORT_VERSION}")
  target_link_libraries(onnxruntime_providers_webgpu PRIVATE ${onnxruntime_dawn_libs})
  set_target_properties(onnxruntime_providers_webgpu PROPERTIES BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")
else()
  target_sources(onnxruntime PRIVATE ${onnxruntime_webgpu_srcs} "${ONNXRUNTIME_ROOT}/core/providers/webgpu/dawn_info.cc")
  target_compile_definitions(onnxruntime PRIVATE USE_WEBGPU=1)
  target_link_libraries(onnxruntime PRIVATE ${onnxruntime_dawn_libs})
  set_target_properties(onnxruntime PROPERTIES BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")
endif()
