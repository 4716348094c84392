# Runs the simulator's tests on the hidden case that provokes an undeclared violation: the
# process must say so and exit with status 86, although every assertion in it passed.
execute_process(COMMAND ${EXE} "[unexpected_violation]" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 86)
  message(FATAL_ERROR "expected exit status 86, got '${rc}'\n${out}\n${err}")
endif()
if(NOT err MATCHES "VIOLATION in cudaStreamSynchronize: a stream used after cudaStreamDestroy")
  message(FATAL_ERROR "the violation was not reported:\n${err}")
endif()
