# Installs devicekit to a temporary prefix and builds an outside project against it:
#  0. the installed package files name no absolute path outside the prefix (dependencies are
#     imported targets found again at the consumer's configure time);
#  1. find_package: a .cpp compiled by g++ and, when there is nvcc, the same .cu with no
#     CUDA_STANDARD (app_cu) and with CUDA_STANDARD 20 (app_cu20), each given -std=c++20 once;
#  2. the same consumer configured as with a CMake that knows nvcc's C++20 flag (flags checked);
#  3. find_package with the toolkit at another path (CUDAToolkit_ROOT=<a symlink to it>): the
#     consumer's include paths and libraries come from there, and NCCL is found again (there or
#     in NCCL_HOME, a wheel, a system path), never at the original toolkit's path;
#  4. add_subdirectory of the source tree.
# Run by CTest as install.find_package; with -DNCCL_HOME=<dir> (install.nccl_wheel), step 0 and a
# devicekit::nccl consumer with NCCL from <dir> only; with -DRMM_ROOT=<dir> (install.rmm_wheel),
# step 0 and a devicekit::rmm consumer with RMM from <dir> only.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# The compile command of <source file name> for <target> in <build dir>'s compile_commands.json
# (the one whose object goes to CMakeFiles/<target>.dir/).
function(compile_command build_dir target source out_var)
  file(READ ${build_dir}/compile_commands.json json)
  string(JSON n LENGTH "${json}")
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON command GET "${json}" ${i} command)
    if(command MATCHES " -o CMakeFiles/${target}\\.dir/[^ ]*${source}\\.o( |$)")
      set(${out_var} "${command}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "no compile command for ${target} (${source}) in ${build_dir}/compile_commands.json")
endfunction()

# Fails unless nvcc's command line for <target> in <build dir> asks for C++20 exactly once.
function(expect_cxx20_once build_dir target)
  compile_command(${build_dir} ${target} main.cu command)
  string(REGEX MATCHALL "-std=c\\+\\+20" found "${command}")
  list(LENGTH found count)
  string(REGEX MATCHALL "-std=[^ ]+" all "${command}")
  list(LENGTH all all_count)
  if(NOT count EQUAL 1 OR NOT all_count EQUAL 1)
    message(FATAL_ERROR "${target} in ${build_dir}: expected -std=c++20 once and no other -std, got:\n${command}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
set(package_dir ${WORK_DIR}/prefix/lib/cmake/devicekit)
if(NOT EXISTS ${package_dir}/devicekitConfig.cmake)
  message(FATAL_ERROR "the install did not produce lib/cmake/devicekit/devicekitConfig.cmake")
endif()

# 0. Every property the installed targets carry is relative to the prefix or names a target.
set(forbidden "/usr/local/cuda")
if(TOOLKIT_ROOT)
  file(REAL_PATH "${TOOLKIT_ROOT}" toolkit_real)
  list(APPEND forbidden "${TOOLKIT_ROOT}" "${toolkit_real}")
endif()
file(GLOB package_files ${package_dir}/*.cmake)
foreach(file IN LISTS package_files)
  file(STRINGS ${file} lines)
  foreach(line IN LISTS lines)
    if(line MATCHES "^  (INTERFACE|IMPORTED)_[A-Z_]+ \"(.*)\"$")
      string(REPLACE "\\\"" "" value "${CMAKE_MATCH_2}")
      foreach(item IN LISTS value)
        if(item MATCHES "^/")
          message(FATAL_ERROR "${file} names an absolute path, which another machine may not have:\n${line}")
        endif()
      endforeach()
    endif()
  endforeach()
  file(READ ${file} text)
  foreach(path IN LISTS forbidden)
    string(FIND "${text}" "${path}" at)
    if(at GREATER -1)
      message(FATAL_ERROR "${file} names the toolkit's path ${path}: it must come from CUDAToolkit at the consumer")
    endif()
  endforeach()
endforeach()
file(READ ${package_dir}/devicekitTargets.cmake targets_text)
if(NOT targets_text MATCHES "devicekit_deps::hana")
  message(FATAL_ERROR "devicekit::devicekit does not link devicekit_deps::hana (Boost.Hana)")
endif()

set(common -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
if(LAUNCHER)
  list(APPEND common "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}" "-DCMAKE_CUDA_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
set(installed "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix;${PREFIX_PATH}")

# NCCL_HOME given (install.nccl_wheel: the nvidia-nccl-cu13 wheel's nvidia/nccl directory, which
# has include/nccl.h and lib/libnccl.so.2 only): the consumer finds NCCL there at its configure
# time, whatever NCCL the package was built with, and builds and runs a devicekit::nccl program
# (ncclGetVersion needs no GPU). Only this; the other steps are install.find_package's.
if(NCCL_HOME)
  set(nccl_dir ${WORK_DIR}/consumer_nccl)
  run(${CMAKE_COMMAND} -E env NCCL_HOME=${NCCL_HOME}
      ${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${nccl_dir} ${common} ${installed} -DWITH_NCCL_APP=ON)
  file(STRINGS ${nccl_dir}/CMakeCache.txt nccl_cache REGEX "^DEVICEKIT_NCCL_(LIBRARY|INCLUDE_DIR):")
  list(LENGTH nccl_cache nccl_entries)
  if(NOT nccl_entries EQUAL 2)
    message(FATAL_ERROR "the package config did not look for NCCL (${nccl_cache})")
  endif()
  foreach(entry IN LISTS nccl_cache)
    if(NOT entry MATCHES "=${NCCL_HOME}/")
      message(FATAL_ERROR "NCCL_HOME=${NCCL_HOME} is not where the consumer found NCCL: ${entry}")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} --build ${nccl_dir} --target app_nccl)
  run(${nccl_dir}/app_nccl)
  message(STATUS "install check passed (find_package COMPONENTS nccl with NCCL_HOME=${NCCL_HOME}): ${last_output}")
  return()
endif()

# RMM_ROOT given (install.rmm_wheel: the librmm directory of the librmm-cu13 wheel, unpacked beside
# rapids_logger's): a consumer of the component rmm finds RMM there at its configure time, and
# builds and runs a devicekit::rmm program (it needs no GPU). Only this.
if(RMM_ROOT)
  set(rmm_dir ${WORK_DIR}/consumer_rmm)
  run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${rmm_dir} ${common} ${installed} -DWITH_RMM_APP=ON -DRMM_ROOT=${RMM_ROOT})
  file(STRINGS ${rmm_dir}/CMakeCache.txt rmm_cache REGEX "^DEVICEKIT_RMM_(LIBRARY|INCLUDE_DIR):")
  list(LENGTH rmm_cache rmm_entries)
  if(NOT rmm_entries EQUAL 2)
    message(FATAL_ERROR "the package config did not look for RMM (${rmm_cache})")
  endif()
  foreach(entry IN LISTS rmm_cache)
    if(NOT entry MATCHES "=${RMM_ROOT}/")
      message(FATAL_ERROR "RMM_ROOT=${RMM_ROOT} is not where the consumer found RMM: ${entry}")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} --build ${rmm_dir} --target app_rmm)
  run(${rmm_dir}/app_rmm)
  message(STATUS "install check passed (find_package COMPONENTS rmm with RMM_ROOT=${RMM_ROOT}): ${last_output}")
  return()
endif()

# 1. find_package from the installed prefix (with the cuda_sim component when it was built).
run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/consumer ${common} ${installed}
    -DWITH_CUDA_COMPILER=${WITH_CUDA_COMPILER} -DWITH_SIM=${WITH_SIM})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/app_cpp)
if(NOT last_output MATCHES "consumer: default device (cpu|cuda):[0-9]+")
  message(FATAL_ERROR "app_cpp printed an unexpected report:\n${last_output}")
endif()
file(STRINGS ${WORK_DIR}/consumer/CMakeCache.txt hana_dir REGEX "^DEVICEKIT_HANA_INCLUDE_DIR:")
if(NOT hana_dir OR hana_dir MATCHES "NOTFOUND$")
  message(FATAL_ERROR "the package config did not find Boost.Hana again (${hana_dir})")
endif()
if(WITH_CUDA_COMPILER)
  foreach(app app_cu app_cu20)
    if(NOT EXISTS ${WORK_DIR}/consumer/${app})
      message(FATAL_ERROR "the .cu consumer ${app} was not built")
    endif()
    expect_cxx20_once(${WORK_DIR}/consumer ${app})
    run(${WORK_DIR}/consumer/${app})
  endforeach()
endif()

if(WITH_SIM)
  run(${CMAKE_COMMAND} -E env DEVICEKIT_SIM_GPUS=3 ${WORK_DIR}/consumer/app_sim)
  if(NOT last_output MATCHES "consumer on simulated GPUs: 3 GPU\\(s\\), default cuda:0")
    message(FATAL_ERROR "app_sim printed an unexpected line:\n${last_output}")
  endif()
endif()

# 2. As with a CMake that knows nvcc's C++20 flag (CMake 3.25 does not): CMake passes -std=c++20
#    for CUDA_STANDARD 20 itself, and devicekit must not add a second one. Configured only.
if(WITH_CUDA_COMPILER)
  run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/consumer_cuda20 ${common} ${installed}
      -DWITH_CUDA_COMPILER=ON -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20
      -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
  foreach(app app_cu app_cu20)
    expect_cxx20_once(${WORK_DIR}/consumer_cuda20 ${app})
  endforeach()
endif()

# 3. The toolkit somewhere else: a symlink to it, given as CUDAToolkit_ROOT. The package must use
#    it (include/cccl, libcudart, NCCL, the simulator's CUDA headers), not the path it was built with.
if(TOOLKIT_ROOT)
  set(alt ${WORK_DIR}/cuda-alt)
  file(CREATE_LINK ${toolkit_real} ${alt} SYMBOLIC)
  set(alt_dir ${WORK_DIR}/consumer_alt)
  run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${alt_dir} ${common} ${installed} -DCUDAToolkit_ROOT=${alt}
      -DWITH_CUDA_COMPILER=OFF -DWITH_SIM=${WITH_SIM})
  set(alt_targets app_cpp)
  set(app_cpp_source main.cpp)
  set(app_sim_source main_sim.cpp)
  if(WITH_SIM)
    list(APPEND alt_targets app_sim)
  endif()
  run(${CMAKE_COMMAND} --build ${alt_dir} --target ${alt_targets})
  run(${alt_dir}/app_cpp)
  file(READ ${alt_dir}/build.ninja ninja)
  foreach(target IN LISTS alt_targets)
    compile_command(${alt_dir} ${target} ${${target}_source} command)
    if(NOT command MATCHES "${alt}/[^ ]*/cccl( |$)")
      message(FATAL_ERROR "${target} does not get CCCL from CUDAToolkit_ROOT=${alt}:\n${command}")
    endif()
    list(APPEND checked "${command}")
  endforeach()
  if(NOT ninja MATCHES "${alt}/[^ ]*libcudart")
    message(FATAL_ERROR "app_cpp does not link libcudart from CUDAToolkit_ROOT=${alt} (${alt_dir}/build.ninja)")
  endif()
  list(APPEND checked "${ninja}")
  if(WITH_NCCL)
    # NCCL may come from the toolkit, NCCL_HOME, the python3's wheel or a system path: found it
    # must be, and not at the original toolkit's path (from the toolkit, then under ${alt}).
    file(STRINGS ${alt_dir}/CMakeCache.txt nccl_cache REGEX "^DEVICEKIT_NCCL_(LIBRARY|INCLUDE_DIR):")
    foreach(entry IN LISTS nccl_cache)
      if(entry MATCHES "NOTFOUND$|=$")
        message(FATAL_ERROR "NCCL is not found again with CUDAToolkit_ROOT=${alt}: ${entry}")
      endif()
      foreach(path IN LISTS forbidden)
        if(entry MATCHES "=${path}/")
          message(FATAL_ERROR "with CUDAToolkit_ROOT=${alt}, NCCL still comes from ${path}: ${entry}")
        endif()
      endforeach()
    endforeach()
    list(LENGTH nccl_cache nccl_entries)
    if(NOT nccl_entries EQUAL 2)
      message(FATAL_ERROR "the package config did not look for NCCL again (${nccl_cache})")
    endif()
  endif()
  foreach(path IN LISTS forbidden)
    foreach(text IN LISTS checked)
      string(FIND "${text}" "${path}" at)
      if(at GREATER -1)
        message(FATAL_ERROR "with CUDAToolkit_ROOT=${alt}, the consumer still uses ${path} (${alt_dir})")
      endif()
    endforeach()
  endforeach()
endif()

# 4. add_subdirectory of the source tree.
run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/subdir ${common} "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}"
    -DDEVICEKIT_SOURCE_DIR=${SOURCE_DIR} -DWITH_CUDA_COMPILER=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/subdir)
run(${WORK_DIR}/subdir/app_cpp)
message(STATUS "install check passed (find_package: .cpp${WITH_CUDA_COMPILER}; alternate toolkit: ${TOOLKIT_ROOT}; "
               "add_subdirectory: .cpp)")
