# CTest `consumer_project`: the installed numeq package works for a downstream CMake project.
#
#   cmake -DNUMEQ_BUILD_DIR=<numeq build dir> -DNUMEQ_CONSUMER_SOURCE=<examples/consumer>
#         -DNUMEQ_SCRATCH=<scratch dir> -P consumer_test.cmake
#
# Installs NUMEQ_BUILD_DIR into ${NUMEQ_SCRATCH}/prefix, configures the consumer against that
# prefix with find_package(numeq CONFIG) into ${NUMEQ_SCRATCH}/build, builds it and runs it. Any
# failing step is a FATAL_ERROR that echoes the step's output.

foreach(var NUMEQ_BUILD_DIR NUMEQ_CONSUMER_SOURCE NUMEQ_SCRATCH)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_test.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix ${NUMEQ_SCRATCH}/prefix)
set(build ${NUMEQ_SCRATCH}/build)
file(REMOVE_RECURSE ${prefix} ${build})  # nothing stale from an earlier run can pass for this one

# Runs a command; on a nonzero exit (or a failure to start) stops with its output.
function(run_step name)
  execute_process(COMMAND ${ARGN}
                  RESULT_VARIABLE result
                  OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT result STREQUAL "0")
    message(FATAL_ERROR "consumer_project: ${name} failed (${result}):\n${ARGN}\n${output}")
  endif()
  message(STATUS "consumer_project: ${name}: ok")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

# Settings of the numeq build the consumer must share: its compiler, its build type and, for a
# sanitizer build, the sanitizer runtimes at link time (the installed static library calls into
# them). The consumer's own code is compiled without sanitizers: GCC 12 with -fsanitize=null
# rejects numeq/formats/array.hpp's static_assert(source != nullptr) as non-constant.
load_cache(${NUMEQ_BUILD_DIR} READ_WITH_PREFIX numeq_ CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE NUMEQ_SANITIZE)
set(consumer_args -DCMAKE_PREFIX_PATH=${prefix})
if(numeq_CMAKE_CXX_COMPILER)
  list(APPEND consumer_args -DCMAKE_CXX_COMPILER=${numeq_CMAKE_CXX_COMPILER})
endif()
if(numeq_CMAKE_BUILD_TYPE)
  list(APPEND consumer_args -DCMAKE_BUILD_TYPE=${numeq_CMAKE_BUILD_TYPE})
endif()
if(numeq_NUMEQ_SANITIZE)
  list(APPEND consumer_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()

# The library must be built before it can be installed (a no-op when it is up to date).
run_step("build numeq" ${CMAKE_COMMAND} --build ${NUMEQ_BUILD_DIR} --target numeq_formats)
run_step("install" ${CMAKE_COMMAND} --install ${NUMEQ_BUILD_DIR} --prefix ${prefix})
run_step("configure consumer" ${CMAKE_COMMAND} -S ${NUMEQ_CONSUMER_SOURCE} -B ${build} ${consumer_args})
run_step("build consumer" ${CMAKE_COMMAND} --build ${build})

find_program(consumer_exe numeq_consumer PATHS ${build} ${build}/Release ${build}/Debug NO_DEFAULT_PATH)
if(NOT consumer_exe)
  message(FATAL_ERROR "consumer_project: no numeq_consumer executable under ${build}")
endif()
run_step("run consumer" ${consumer_exe})
message(STATUS "consumer output:\n${step_output}")
