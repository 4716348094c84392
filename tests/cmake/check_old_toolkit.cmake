# An older CUDA toolkit is set aside at configure time with a message, and the build goes on
# without CUDA (README, "Requirements"): the headers need cudaStreamGetDevice (CUDA 12.8), so an
# older toolkit would otherwise fail deep inside them.
#
# A fake toolkit in WORK: this machine's headers and libraries, and an nvcc that says it is CUDA
# 12.6 (FindCUDAToolkit takes the version from `nvcc --version` when no CUDA language is enabled).
# Run by CTest as cmake.old_toolkit_ignored:
#   cmake -DSOURCE_DIR=<devicekit> -DTOOLKIT=<real toolkit root> -DWORK=<scratch dir> -P check_old_toolkit.cmake
foreach(var SOURCE_DIR TOOLKIT WORK)
  if(NOT ${var})
    message(FATAL_ERROR "check_old_toolkit.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/cuda/bin)
file(CREATE_LINK ${TOOLKIT}/include ${WORK}/cuda/include SYMBOLIC)
file(CREATE_LINK ${TOOLKIT}/lib64 ${WORK}/cuda/lib64 SYMBOLIC)
file(WRITE ${WORK}/nvcc "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                        "echo 'Cuda compilation tools, release 12.6, V12.6.85'\n")
file(COPY ${WORK}/nvcc DESTINATION ${WORK}/cuda/bin
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK}/build -DCUDAToolkit_ROOT=${WORK}/cuda
                        -DDEVICEKIT_BUILD_TESTS=OFF -DDEVICEKIT_BUILD_EXAMPLES=OFF -DDEVICEKIT_BUILD_TOOLS=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring against a CUDA 12.6 toolkit failed (${rc}) instead of building without CUDA:\n${all}")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${all}")  # CMake wraps warning text
if(NOT flat MATCHES "CUDA 12\\.6\\.85 is older than 12\\.8, which devicekit needs")
  message(FATAL_ERROR "no message naming the old toolkit and the version devicekit needs:\n${all}")
endif()
if(NOT flat MATCHES "Point CUDAToolkit_ROOT at CUDA 12\\.8 or later")
  message(FATAL_ERROR "the message does not say what to do:\n${all}")
endif()
if(NOT flat MATCHES "devicekit: CUDA runtime OFF")
  message(FATAL_ERROR "the build did not go on without CUDA:\n${all}")
endif()
file(REMOVE_RECURSE ${WORK})
message(STATUS "a CUDA 12.6 toolkit was set aside with its message; the build is the CPU-only one")
