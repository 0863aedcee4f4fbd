# Shared by the CTest scripts that build a project against the installed numeq package
# (consumer_test.cmake, kernel_test.cmake): include() it after setting
#   NUMEQ_BUILD_DIR   the numeq build directory
#   NUMEQ_PROJECT_SOURCE  the downstream project (examples/...)
#   NUMEQ_SCRATCH     a scratch directory: numeq is installed into ${NUMEQ_SCRATCH}/prefix, the
#                     project configured and built in ${NUMEQ_SCRATCH}/build (variable `build`)
#   NUMEQ_STEP_PREFIX how the messages name the test
# Any failing step is a FATAL_ERROR that echoes the step's output; run_step is there for the
# including script's own steps (its output lands in `step_output`).

foreach(var NUMEQ_BUILD_DIR NUMEQ_PROJECT_SOURCE NUMEQ_SCRATCH NUMEQ_STEP_PREFIX)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "installed_project.cmake: ${var} is not set")
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
    message(FATAL_ERROR "${NUMEQ_STEP_PREFIX}: ${name} failed (${result}):\n${ARGN}\n${output}")
  endif()
  message(STATUS "${NUMEQ_STEP_PREFIX}: ${name}: ok")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

# Settings of the numeq build the project must share: its compiler, its build type and, for a
# sanitizer build, the sanitizer runtimes at link time (the installed static library calls into
# them). The project's own code is compiled without sanitizers: GCC 12 with -fsanitize=null
# rejects numeq/formats/array.hpp's static_assert(source != nullptr) as non-constant.
load_cache(${NUMEQ_BUILD_DIR} READ_WITH_PREFIX numeq_ CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE NUMEQ_SANITIZE
           NUMEQ_BUILD_PYTHON)
set(project_args -DCMAKE_PREFIX_PATH=${prefix})
if(numeq_CMAKE_CXX_COMPILER)
  list(APPEND project_args -DCMAKE_CXX_COMPILER=${numeq_CMAKE_CXX_COMPILER})
endif()
if(numeq_CMAKE_BUILD_TYPE)
  list(APPEND project_args -DCMAKE_BUILD_TYPE=${numeq_CMAKE_BUILD_TYPE})
endif()
if(numeq_NUMEQ_SANITIZE)
  list(APPEND project_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()

# Everything `cmake --install` copies must be built first (a no-op when it is up to date): the
# libraries, and the Python module when the build has it.
set(installed numeq_formats numeq_core numeq_references numeq_cases)
if(numeq_NUMEQ_BUILD_PYTHON)
  list(APPEND installed _core)
endif()
run_step("build numeq" ${CMAKE_COMMAND} --build ${NUMEQ_BUILD_DIR} --target ${installed})
run_step("install" ${CMAKE_COMMAND} --install ${NUMEQ_BUILD_DIR} --prefix ${prefix})
run_step("configure" ${CMAKE_COMMAND} -S ${NUMEQ_PROJECT_SOURCE} -B ${build} ${project_args})
run_step("build" ${CMAKE_COMMAND} --build ${build})

# The executable `name` of the built project, in `${out_var}`.
function(find_project_executable out_var name)
  find_program(exe ${name} PATHS ${build} ${build}/Release ${build}/Debug NO_DEFAULT_PATH NO_CACHE)
  if(NOT exe)
    message(FATAL_ERROR "${NUMEQ_STEP_PREFIX}: no ${name} executable under ${build}")
  endif()
  set(${out_var} ${exe} PARENT_SCOPE)
endfunction()
