# The list of names the simulator counts calls under (SRC/api_names.hpp, counted_apis), which fault
# injection accepts, is exactly the names its entry points pass (SRC: the simulator's sources):
# each name an entry point counts is listed (else DEVICEKIT_SIM_FAIL and fail_call would refuse a
# real function), and each listed name is counted somewhere (else a failure armed on it would never
# fire). An entry point counts its calls through injected(), reached by SIM_ENTER("name"),
# SIM_ENTER_STREAM("name", ...), `entry e("name")` and NCCL's collective("name", ...) and
# point_to_point("name", ...); names of the control API (device_count, nccl_hang_after, ...) are
# counted too but are no CUDA or NCCL function. A new way to reach injected() fails the check until
# it is read here.
cmake_minimum_required(VERSION 3.24)  # IN_LIST
file(GLOB sources ${SRC}/*.cpp ${SRC}/*.hpp)
list(REMOVE_ITEM sources ${SRC}/api_names.hpp ${SRC}/api_names.cpp)
set(callers "")
set(counted "")
foreach(source IN LISTS sources)
  file(READ ${source} text)
  if(text MATCHES "[^a-z_]injected\\(g, ")
    get_filename_component(name ${source} NAME)
    list(APPEND callers ${name})
  endif()
  # One regular expression over the entry points' openings; a name may follow a line break.
  string(REGEX MATCHALL
         "(SIM_ENTER|SIM_ENTER_STREAM|entry [a-z_]+|collective|point_to_point)\\([ \t\r\n]*\"(cuda|cu|nccl)[A-Z][A-Za-z0-9_]*\""
         found "${text}")
  foreach(call IN LISTS found)
    string(REGEX MATCH "\"[A-Za-z0-9_]+\"$" quoted "${call}")
    string(REPLACE "\"" "" api "${quoted}")
    list(APPEND counted ${api})
  endforeach()
endforeach()
list(SORT callers)
if(NOT callers STREQUAL "entry.hpp;nccl_collectives.cpp")
  message(FATAL_ERROR "injected() is called from ${callers}, where entry.hpp (`entry`) "
                      "and nccl_collectives.cpp (collective) were expected: read the names the new caller passes "
                      "in tests/sim/expect_api_names.cmake")
endif()
list(REMOVE_DUPLICATES counted)
list(LENGTH counted count)
if(count LESS 60)
  message(FATAL_ERROR "found only ${count} counted names in ${SRC}: ${counted}")
endif()

file(READ ${SRC}/api_names.hpp header)
string(REGEX MATCH "counted_apis\\[\\] = {[^}]*}" block "${header}")
string(REGEX MATCHALL "\"[A-Za-z0-9_]+\"" listed "${block}")
string(REPLACE "\"" "" listed "${listed}")
set(missing "")
foreach(api IN LISTS counted)
  if(NOT api IN_LIST listed)
    list(APPEND missing ${api})
  endif()
endforeach()
set(unused "")
foreach(api IN LISTS listed)
  if(NOT api IN_LIST counted)
    list(APPEND unused ${api})
  endif()
endforeach()
if(missing OR unused)
  message(FATAL_ERROR "sim/src/api_names.hpp's counted_apis differs from the names the entry points count:\n"
                      "  counted but not listed (fault injection refuses them): ${missing}\n"
                      "  listed but counted nowhere (a failure armed on them never fires): ${unused}")
endif()
list(LENGTH listed n)
message(STATUS "${n} names, each counted by an entry point and listed: ${listed}")
