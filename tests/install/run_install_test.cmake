# ctest driver for tests/install: installs the main build into a fresh prefix, then
# configures, builds and runs the consumer project against that prefix alone.
# Inputs (-D): EMBER_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER.
cmake_minimum_required(VERSION 3.25)
foreach(var EMBER_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install test: ${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run_step("cmake --install" ${CMAKE_COMMAND} --install ${EMBER_BUILD_DIR} --prefix ${prefix})

set(configure_args -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
                   -DCMAKE_BUILD_TYPE=Release)
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
run_step("configure consumer (find_package(ember))" ${CMAKE_COMMAND} ${configure_args})
run_step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("run consumer" ${WORK_DIR}/build/app)
message(STATUS "${last_output}")
