# Installs devicekit to a temporary prefix and builds an outside project against it twice:
# with find_package (a .cpp compiled by g++, and a .cu by nvcc when there is one) and with
# add_subdirectory. Run by CTest as install.find_package.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
if(NOT EXISTS ${WORK_DIR}/prefix/lib/cmake/devicekit/devicekitConfig.cmake)
  message(FATAL_ERROR "the install did not produce lib/cmake/devicekit/devicekitConfig.cmake")
endif()

set(common -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
if(LAUNCHER)
  list(APPEND common "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}" "-DCMAKE_CUDA_COMPILER_LAUNCHER=${LAUNCHER}")
endif()

# 1. find_package from the installed prefix (with the cuda_sim component when it was built).
run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/consumer ${common}
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix;${PREFIX_PATH}" -DWITH_CUDA_COMPILER=${WITH_CUDA_COMPILER}
    -DWITH_SIM=${WITH_SIM})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/app_cpp)
if(NOT last_output MATCHES "consumer: default device (cpu|cuda):[0-9]+")
  message(FATAL_ERROR "app_cpp printed an unexpected report:\n${last_output}")
endif()
if(WITH_CUDA_COMPILER)
  if(NOT EXISTS ${WORK_DIR}/consumer/app_cu)
    message(FATAL_ERROR "the .cu consumer was not built")
  endif()
  run(${WORK_DIR}/consumer/app_cu)
endif()

if(WITH_SIM)
  run(${CMAKE_COMMAND} -E env DEVICEKIT_SIM_GPUS=3 ${WORK_DIR}/consumer/app_sim)
  if(NOT last_output MATCHES "consumer on simulated GPUs: 3 GPU\\(s\\), default cuda:0")
    message(FATAL_ERROR "app_sim printed an unexpected line:\n${last_output}")
  endif()
endif()

# 2. add_subdirectory of the source tree.
run(${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/subdir ${common} "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}"
    -DDEVICEKIT_SOURCE_DIR=${SOURCE_DIR} -DWITH_CUDA_COMPILER=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/subdir)
run(${WORK_DIR}/subdir/app_cpp)
message(STATUS "install check passed (find_package: .cpp${WITH_CUDA_COMPILER}; add_subdirectory: .cpp)")
