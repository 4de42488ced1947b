# mini_ort's cmake/external/onnxruntime_external_deps.cmake: the parts of onnxruntime's file that
# concern Dawn, in its shape: abseil first, then the Dawn options ORT forces, then Dawn from a
# custom source dir (ORT's patch step skipped) or from the deps.txt archive with ORT's Dawn patches
# and Dawn's own clones (DAWN_FETCH_DEPENDENCIES).
include(external/abseil-cpp.cmake)

if (onnxruntime_USE_WEBGPU)
  set(DAWN_BUILD_SAMPLES OFF CACHE BOOL "" FORCE)
  set(DAWN_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(TINT_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  if (onnxruntime_BUILD_DAWN_SHARED_LIBRARY)
    set(DAWN_BUILD_MONOLITHIC_LIBRARY SHARED CACHE STRING "" FORCE)
  else()
    set(DAWN_BUILD_MONOLITHIC_LIBRARY OFF CACHE STRING "" FORCE)
  endif()
  set(DAWN_ENABLE_DESKTOP_GL OFF CACHE BOOL "" FORCE)
  set(DAWN_USE_GLFW OFF CACHE BOOL "" FORCE)
  set(DAWN_USE_X11 OFF CACHE BOOL "" FORCE)
  if (WIN32)
    set(DAWN_USE_BUILT_DXC ON CACHE BOOL "" FORCE)
    if (onnxruntime_ENABLE_DAWN_BACKEND_VULKAN)
      set(DAWN_ENABLE_VULKAN ON CACHE BOOL "" FORCE)
    else()
      set(DAWN_ENABLE_VULKAN OFF CACHE BOOL "" FORCE)
    endif()
    set(DAWN_ENABLE_D3D12 ON CACHE BOOL "" FORCE)
  endif()

  if (onnxruntime_CUSTOM_DAWN_SRC_PATH)
    set(DAWN_FETCH_DEPENDENCIES OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(dawn SOURCE_DIR ${onnxruntime_CUSTOM_DAWN_SRC_PATH})
  else()
    set(DAWN_FETCH_DEPENDENCIES ON CACHE BOOL "" FORCE)
    find_package(Patch)
    set(ONNXRUNTIME_Dawn_PATCH_COMMAND
        ${Patch_EXECUTABLE} --binary --ignore-whitespace -p1 < ${PROJECT_SOURCE_DIR}/patches/dawn/mini_dawn_enable.patch &&
        ${CMAKE_COMMAND} -E rm -rf <SOURCE_DIR>/test)
    FetchContent_Declare(dawn URL ${DEP_URL_dawn} URL_HASH SHA1=${DEP_SHA1_dawn} PATCH_COMMAND ${ONNXRUNTIME_Dawn_PATCH_COMMAND})
  endif()
  FetchContent_MakeAvailable(dawn)
endif()
