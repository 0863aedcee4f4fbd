# CTest `kernel_test`: examples/kernel-test, a kernel test binary using numeq/testing.hpp's
# matchers, built against the installed numeq package (installed_project.cmake), passes for the
# kernel as written and fails, with numeq's verdict in its output, for each planted bug.
#
#   cmake -DNUMEQ_BUILD_DIR=<numeq build dir> -DNUMEQ_PROJECT_SOURCE=<examples/kernel-test>
#         -DNUMEQ_SCRATCH=<scratch dir> -P kernel_test.cmake

set(NUMEQ_STEP_PREFIX kernel_test)
include(${CMAKE_CURRENT_LIST_DIR}/installed_project.cmake)

find_project_executable(kernel_exe kernel_test)
run_step("run the correct kernel" ${kernel_exe} --gtest_brief=1)
message(STATUS "correct kernel:\n${step_output}")

# A planted bug: the binary must fail, every test of it, and say why in numeq's words. One bug is
# chosen by the flag, one by the environment variable: both ways work.
function(expect_failure bug)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(result STREQUAL "0")
    message(FATAL_ERROR "kernel_test: the kernel with bug ${bug} passed its tests:\n${output}")
  endif()
  foreach(part "planted bug: ${bug}" "FAIL (violation)" "worst elements (by error / bound)" "FAIL (port check)"
          "4 FAILED TESTS")
    string(FIND "${output}" "${part}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "kernel_test: the output for bug ${bug} lacks \"${part}\":\n${output}")
    endif()
  endforeach()
  message(STATUS "kernel_test: bug ${bug}: fails as it should")
endfunction()
expect_failure(bf16_accumulator ${kernel_exe} --bug=bf16_accumulator)
expect_failure(drop_last_k_tile ${CMAKE_COMMAND} -E env KERNEL_BUG=drop_last_k_tile ${kernel_exe})
