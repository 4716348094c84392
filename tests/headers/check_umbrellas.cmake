# Every public header of a layer is in that layer's umbrella (<devicekit/LAYER.hpp>), and the
# umbrella <devicekit/devicekit.hpp> includes every layer's, so that a header added to a layer
# (or renamed) cannot silently drop out of the umbrellas.
#   cmake -DROOT=<include dir> -P check_umbrellas.cmake
# Left out on purpose: report/json.hpp (nlohmann-json: included where JSON is written) and
# tree/hana.hpp (included by tree.hpp only where Boost.Hana is available, outside nvcc).
cmake_minimum_required(VERSION 3.24)
set(layers core detect tree memory place distribute report)
set(left_out report/json.hpp)
set(problems "")
file(READ ${ROOT}/devicekit/devicekit.hpp all)
foreach(layer IN LISTS layers)
  if(NOT all MATCHES "#include <devicekit/${layer}.hpp>")
    string(APPEND problems "  devicekit.hpp does not include <devicekit/${layer}.hpp>\n")
  endif()
  file(READ ${ROOT}/devicekit/${layer}.hpp umbrella)
  file(GLOB headers RELATIVE ${ROOT}/devicekit ${ROOT}/devicekit/${layer}/*.hpp)
  foreach(h IN LISTS headers)
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
