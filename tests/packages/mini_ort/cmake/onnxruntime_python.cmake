# The interpreter and headers the bindings build against, found as onnxruntime finds them (it adds NumPy).
find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)

# Assemble the Python package in the build tree, as onnxruntime's build does before its setup.py
# packs it: <build>/onnxruntime/__init__.py, <build>/onnxruntime/capi/{*.py, the library}.
set(onnxruntime_python_dir "${CMAKE_BINARY_DIR}/onnxruntime")
file(GLOB onnxruntime_python_srcs CONFIGURE_DEPENDS "${ONNXRUNTIME_ROOT}/python/*.py")
add_custom_command(TARGET onnxruntime POST_BUILD
  COMMAND ${CMAKE_COMMAND} -E make_directory "${onnxruntime_python_dir}/capi"
  COMMAND ${CMAKE_COMMAND} -E copy_if_different "${ONNXRUNTIME_ROOT}/__init__.py" "${onnxruntime_python_dir}/"
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${onnxruntime_python_srcs} "${onnxruntime_python_dir}/capi/"
  # Under its unversioned name: the loader opens the file next to it, not through the linker.
  COMMAND ${CMAKE_COMMAND} -E copy_if_different "$<TARGET_FILE:onnxruntime>"
          "${onnxruntime_python_dir}/capi/$<TARGET_FILE_PREFIX:onnxruntime>onnxruntime$<TARGET_FILE_SUFFIX:onnxruntime>"
  VERBATIM)
if(TARGET webgpu_dawn AND NOT onnxruntime_USE_EP_API_ADAPTERS)
  add_custom_command(TARGET onnxruntime POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different "$<TARGET_FILE:webgpu_dawn>" "${onnxruntime_python_dir}/capi/"
    VERBATIM)
endif()
