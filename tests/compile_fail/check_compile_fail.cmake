# Compiles SOURCE (expected to fail) and checks that the diagnostics contain EXPECT.
#   cmake -DCXX=... -DSOURCE=... -DINCLUDES="a,b" -DEXPECT=... -P check_compile_fail.cmake
# INCLUDES is comma-separated: a CMake list would be split into arguments by add_test.
string(REPLACE "," ";" INCLUDES "${INCLUDES}")
set(args -std=c++20 -fsyntax-only)
foreach(dir IN LISTS INCLUDES)
  list(APPEND args "-I${dir}")
endforeach()
execute_process(COMMAND ${CXX} ${args} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must be rejected")
endif()
string(FIND "${out}${err}" "${EXPECT}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "the compiler rejected ${SOURCE} without naming '${EXPECT}':\n${err}")
endif()
message(STATUS "rejected as expected, naming '${EXPECT}'")
