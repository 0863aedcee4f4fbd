# CTest `consumer_project`: the installed numeq package works for a downstream CMake project.
#
#   cmake -DNUMEQ_BUILD_DIR=<numeq build dir> -DNUMEQ_CONSUMER_SOURCE=<examples/consumer>
#         -DNUMEQ_SCRATCH=<scratch dir> -P consumer_test.cmake
#
# Installs NUMEQ_BUILD_DIR into ${NUMEQ_SCRATCH}/prefix, configures the consumer against that
# prefix with find_package(numeq CONFIG) into ${NUMEQ_SCRATCH}/build, builds it and runs it
# (installed_project.cmake). Any failing step is a FATAL_ERROR that echoes the step's output.

set(NUMEQ_PROJECT_SOURCE ${NUMEQ_CONSUMER_SOURCE})
set(NUMEQ_STEP_PREFIX consumer_project)
include(${CMAKE_CURRENT_LIST_DIR}/installed_project.cmake)

find_project_executable(consumer_exe numeq_consumer)
run_step("run consumer" ${consumer_exe})
message(STATUS "consumer output:\n${step_output}")
