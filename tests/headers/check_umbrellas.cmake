# Every public header of a layer is in that layer's umbrella (<devicekit/LAYER.hpp>), and the
# umbrella <devicekit/devicekit.hpp> includes every layer's, so that a header added to a layer
# (or renamed) cannot silently drop out of the umbrellas.
#   cmake -DROOT=<include dir> -P check_umbrellas.cmake
# Left out on purpose: report/json.hpp (nlohmann-json: included where JSON is written),
# memory/cublas_workspace.hpp (cuBLAS's header: included where cuBLAS is used and linked)
# and tree/hana.hpp (included by tree.hpp only where Boost.Hana is available, outside nvcc).
# The compute layer's umbrella is complete but devicekit.hpp leaves it out (layers_not_in_all):
# Thrust's host algorithms cost about 0.7 s of every translation unit that includes them, so
# <devicekit/compute.hpp> is included where trees are computed on.
# Headers in `top_level` sit in a layer's folder but need layers above it: devicekit.hpp includes
# them instead of the layer's umbrella.
# Layers in `all_detail` declare nothing public, so all their headers are under their detail/
# folder: transfer/ is the copy engine that placement is built on (its one public header,
# batched_copy.cuh, is nvcc-only), and its umbrella includes the engine itself.
cmake_minimum_required(VERSION 3.24)
set(layers core detect tree memory transfer place compute distribute report manager)
set(layers_not_in_all compute)
set(left_out report/json.hpp memory/cublas_workspace.hpp)
set(top_level "")
set(all_detail transfer)
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
if(NOT EXISTS ${ROOT}/devicekit/devicekit.hpp)
  message(FATAL_ERROR "ROOT=${ROOT} is not devicekit's include directory (no devicekit/devicekit.hpp there)")
endif()
set(problems "")
file(READ ${ROOT}/devicekit/devicekit.hpp all)
foreach(layer IN LISTS layers)
  if(layer IN_LIST layers_not_in_all)
    if(all MATCHES "#include <devicekit/${layer}.hpp>")
      string(APPEND problems "  devicekit.hpp includes <devicekit/${layer}.hpp>, which is left out on purpose\n")
    endif()
  elseif(NOT all MATCHES "#include <devicekit/${layer}.hpp>")
    string(APPEND problems "  devicekit.hpp does not include <devicekit/${layer}.hpp>\n")
  endif()
  file(READ ${ROOT}/devicekit/${layer}.hpp umbrella)
  file(GLOB headers RELATIVE ${ROOT}/devicekit ${ROOT}/devicekit/${layer}/*.hpp)
  if(layer IN_LIST all_detail)
    if(headers)
      string(APPEND problems "  ${layer}/ has public headers (${headers}); take ${layer} out of all_detail\n")
    endif()
  elseif(NOT headers)
    string(APPEND problems "  no headers found in ${ROOT}/devicekit/${layer}\n")
  endif()
  foreach(h IN LISTS headers)
    if(h IN_LIST top_level)
      if(NOT all MATCHES "#include <devicekit/${h}>")
        string(APPEND problems "  devicekit.hpp does not include <devicekit/${h}>\n")
      endif()
      if(umbrella MATCHES "#include <devicekit/${h}>")
        string(APPEND problems "  ${layer}.hpp includes ${h}, which belongs in devicekit.hpp\n")
      endif()
      continue()
    endif()
    if(h IN_LIST left_out)
      if(umbrella MATCHES "#include <devicekit/${h}>")
        string(APPEND problems "  ${layer}.hpp includes ${h}, which is left out on purpose\n")
      endif()
      continue()
    endif()
    if(NOT umbrella MATCHES "# *include <devicekit/${h}>")
      string(APPEND problems "  ${layer}.hpp does not include <devicekit/${h}>\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "umbrella headers are incomplete:\n${problems}Add the include (or, for a header "
                      "that must stay out, list it in tests/headers/check_umbrellas.cmake with the reason).")
endif()
message(STATUS "every public header is in its layer's umbrella")
