# ctest driver for tests/install: installs the main build into a fresh prefix, then
# configures, builds and runs the consumer project against that prefix alone.
# Inputs (-D): EMBER_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, and
# CUDA_TOOLKIT_ROOT for a CUDA build (the toolkit the last check hides).
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

# The compiler of the programs below built without CMake (pkg-config, dlopen).
if(NOT CXX_COMPILER)
  set(CXX_COMPILER c++)
endif()

# The same program built from the pkg-config file alone (lib/pkgconfig/ember.pc).
find_program(PKG_CONFIG_EXECUTABLE NAMES pkg-config pkgconf)
file(GLOB pc_file ${prefix}/lib*/pkgconfig/ember.pc ${prefix}/lib/*/pkgconfig/ember.pc)
if(NOT pc_file)
  message(FATAL_ERROR "install test: no lib/pkgconfig/ember.pc in ${prefix}")
endif()
get_filename_component(pc_dir ${pc_file} DIRECTORY)
get_filename_component(lib_dir ${pc_dir} DIRECTORY)
if(PKG_CONFIG_EXECUTABLE)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run_step("pkg-config --cflags --libs ember" ${PKG_CONFIG_EXECUTABLE} --cflags --libs ember)
  string(STRIP "${last_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  run_step("build consumer with pkg-config" ${CXX_COMPILER} -std=c++20 ${CONSUMER_SOURCE_DIR}/main.cpp
           ${pc_flags} -Wl,-rpath,${lib_dir} -o ${WORK_DIR}/app_pkg_config)
  run_step("run consumer built with pkg-config" ${WORK_DIR}/app_pkg_config)
else()
  message(STATUS "install test: pkg-config not found, the pkg-config consumer is not built")
endif()

# A shared install: each library exports ember's API only (cmake/ember_exports.map), has its
# SONAME, and finds its siblings and the installed tools find the libraries wherever the prefix
# is moved ($ORIGIN RPATHs, nothing of the build tree).
file(GLOB shared_libs ${lib_dir}/libember_*.so)
if(shared_libs)
  foreach(lib ${shared_libs})
    run_step("symbols of ${lib}" nm -DC --defined-only ${lib})
    string(REGEX MATCHALL "[^\n]*Eigen::[^\n]*" eigen "${last_output}")
    string(REGEX MATCHALL "[^\n]*nlohmann::[^\n]*" json "${last_output}")
    if(eigen OR json)
      list(APPEND eigen ${json})
      list(GET eigen 0 first)
      message(FATAL_ERROR "install test: ${lib} exports a dependency's symbols, e.g. ${first}")
    endif()
    run_step("SONAME of ${lib}" readelf -d ${lib})
    get_filename_component(name ${lib} NAME)
    if(NOT last_output MATCHES "Library soname: \\[${name}\\.[0-9]+\\.[0-9]+\\]")
      message(FATAL_ERROR "install test: ${lib} has no versioned SONAME:\n${last_output}")
    endif()
  endforeach()
  # Loaded at run time by a program that does not link it (a Python extension, a plugin host).
  run_step("build the dlopen check" ${CXX_COMPILER} ${CONSUMER_SOURCE_DIR}/dlopen_check.cpp -ldl
           -o ${WORK_DIR}/dlopen_check)
  run_step("dlopen the installed libraries" ${WORK_DIR}/dlopen_check ${lib_dir}/libember_distributed.so
           ${lib_dir}/libember_amp.so ${lib_dir}/libember_io.so ${lib_dir}/libember_data.so)
  file(RENAME ${prefix} ${WORK_DIR}/moved)
  set(moved_tool ${WORK_DIR}/moved/bin/ember-info)
  run_step("run the installed ember-info from a moved prefix" ${moved_tool} --estimate 124M)
  run_step("libraries of the moved ember-info" ldd ${moved_tool})
  string(REGEX MATCHALL "libember_[a-z]+\\.so[^\n]*" resolved "${last_output}")
  foreach(line ${resolved})
    string(FIND "${line}" "${WORK_DIR}/moved/" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "install test: the moved ember-info loads ${line}, not the moved prefix's")
    endif()
  endforeach()
  if(NOT resolved)
    message(FATAL_ERROR "install test: ldd lists no libember_*.so for a shared install:\n${last_output}")
  endif()
endif()

# A CUDA build's install on a machine without the CUDA toolkit (issue 44): ember's libraries link
# only the CUDA runtime, which the install carries beside them; cuBLASLt, cuDNN and NCCL are
# opened on first use (Note [vendor libraries]). So no installed library may need them, and a
# CPU program must configure, build and run with the toolkit gone: here it is hidden under an
# empty file system mounted over it, in a mount namespace of this test's own (unshare; needs
# the right to mount, as root in CI has; elsewhere that part says why it is skipped).
if(CUDA_TOOLKIT_ROOT AND shared_libs)
  file(RELATIVE_PATH lib_rel ${prefix} ${lib_dir})
  set(moved_lib ${WORK_DIR}/moved/${lib_rel})
  file(GLOB bundled_cudart ${moved_lib}/libcudart.so.*)
  if(NOT bundled_cudart)
    message(FATAL_ERROR "install test: a CUDA install carries no libcudart.so.* in ${moved_lib}")
  endif()
  file(GLOB moved_libs ${moved_lib}/libember_*.so)
  foreach(lib ${moved_libs})
    run_step("libraries ${lib} needs" readelf -d ${lib})
    if(last_output MATCHES "NEEDED[^\n]*\\[(lib(cublas|cudnn|nccl)[^]]*)\\]")
      message(FATAL_ERROR "install test: ${lib} links ${CMAKE_MATCH_1}, which ember must open on first use")
    endif()
  endforeach()
  find_program(UNSHARE_EXECUTABLE unshare)
  get_filename_component(toolkit ${CUDA_TOOLKIT_ROOT} REALPATH)
  set(no_toolkit_build ${WORK_DIR}/build_without_toolkit)
  set(configure_extra "")
  if(GENERATOR)
    string(APPEND configure_extra " -G '${GENERATOR}'")
  endif()
  if(CXX_COMPILER)
    string(APPEND configure_extra " -DCMAKE_CXX_COMPILER='${CXX_COMPILER}'")
  endif()
  set(script "set -e
mount -t tmpfs ember-install-test '${toolkit}'
if ls '${toolkit}'/* >/dev/null 2>&1
then
  echo 'the toolkit is still visible'
  exit 1
fi
'${CMAKE_COMMAND}' -S '${CONSUMER_SOURCE_DIR}' -B '${no_toolkit_build}' -DCMAKE_PREFIX_PATH='${WORK_DIR}/moved' -DCMAKE_BUILD_TYPE=Release${configure_extra} >/dev/null
'${CMAKE_COMMAND}' --build '${no_toolkit_build}' >/dev/null
'${no_toolkit_build}/app'
ldd '${no_toolkit_build}/app' | grep libcudart
'${WORK_DIR}/moved/bin/ember-info'")
  set(can_hide OFF)
  if(UNSHARE_EXECUTABLE)
    execute_process(COMMAND ${UNSHARE_EXECUTABLE} --mount --propagation private true RESULT_VARIABLE rc
                    OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(can_hide ON)
    endif()
  endif()
  if(can_hide)
    file(WRITE ${WORK_DIR}/without_toolkit.sh "${script}\n")  # a file: CMake lists split at ';'
    run_step("a CPU program against the install, the CUDA toolkit (${toolkit}) hidden"
             ${UNSHARE_EXECUTABLE} --mount --propagation private sh ${WORK_DIR}/without_toolkit.sh)
    message(STATUS "${last_output}")
    if(NOT last_output MATCHES "libcudart[^\n]*=> ${WORK_DIR}/moved/")
      message(FATAL_ERROR "install test: without the toolkit the program loads another libcudart:\n${last_output}")
    endif()
    if(NOT last_output MATCHES "versions:[^\n]*cuBLASLt not found")
      message(FATAL_ERROR "install test: ember-info does not say cuBLASLt is gone with the toolkit:\n${last_output}")
    endif()
  else()
    message(STATUS "install test: cannot make a mount namespace here (unshare --mount needs root): "
                   "the CPU program without the CUDA toolkit is not tried")
  endif()
endif()
