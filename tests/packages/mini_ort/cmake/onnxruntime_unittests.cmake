# Test executables, as onnxruntime's cmake makes them with onnxruntime_BUILD_UNIT_TESTS: kernels' tests
# (onnxruntime/test/contrib_ops, onnxruntime/test/providers) in onnxruntime_provider_test, the rest in
# onnxruntime_test_all. mini_gtest, a deps.txt entry like onnxruntime's googletest, stands in for it.
FetchContent_Declare(mini_gtest URL ${DEP_URL_mini_gtest} URL_HASH SHA1=${DEP_SHA1_mini_gtest})
FetchContent_MakeAvailable(mini_gtest)
file(GLOB_RECURSE provider_test_srcs CONFIGURE_DEPENDS
  "${ONNXRUNTIME_ROOT}/test/contrib_ops/*_test.cc" "${ONNXRUNTIME_ROOT}/test/providers/*_test.cc")
file(GLOB_RECURSE all_test_srcs CONFIGURE_DEPENDS "${ONNXRUNTIME_ROOT}/test/*_test.cc")
if(provider_test_srcs)
  list(REMOVE_ITEM all_test_srcs ${provider_test_srcs})
endif()
foreach(test_target IN ITEMS onnxruntime_provider_test onnxruntime_test_all)
  if(test_target STREQUAL "onnxruntime_provider_test")
    set(test_srcs ${provider_test_srcs})
  else()
    set(test_srcs ${all_test_srcs})
  endif()
  add_executable(${test_target} ${test_srcs})
  target_include_directories(${test_target} PRIVATE "${ONNXRUNTIME_ROOT}" "${ONNXRUNTIME_INCLUDE_DIR}")
  target_link_libraries(${test_target} PRIVATE onnxruntime GTest::gtest_main)
endforeach()
