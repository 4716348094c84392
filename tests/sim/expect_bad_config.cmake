# Runs the simulator's tests on the case whose first CUDA call reads the configuration, under the
# bad DEVICEKIT_SIM_* value the test's ENVIRONMENT sets: the process must end (within TIMEOUT, not
# hang), with exit status 2 and the simulator's refusal, which names the variable, its value and
# what it accepts (EXPECT: the start of that refusal).
execute_process(COMMAND ${EXE} "[config_probe]" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "expected exit status 2, got '${rc}'\n${out}\n${err}")
endif()
string(FIND "${err}" "devicekit cuda_sim: bad configuration: ${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the refusal does not start with \"${EXPECT}\":\n${err}")
endif()
string(FIND "${err}" "; accepted: " at)
if(at EQUAL -1)
  message(FATAL_ERROR "the refusal does not say what is accepted:\n${err}")
endif()
