# Use ccache for every compiler when it is installed: an nvcc translation unit costs about 20 s
# on a 2-core machine, and CI rebuilds from a clean clone.
find_program(DEVICEKIT_CCACHE ccache)
if(DEVICEKIT_CCACHE)
  foreach(lang CXX CUDA)
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER "${DEVICEKIT_CCACHE}")
    endif()
  endforeach()
endif()
