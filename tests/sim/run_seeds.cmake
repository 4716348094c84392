# Runs one simulator test executable once per scheduling seed (DEVICEKIT_SIM_SEED = FIRST..LAST):
# the simulator's random delays are a fuzzer, and one seed is one schedule. Every failing seed is
# named with the command that replays it; the test fails if any seed does.
#   cmake -DEXE=<exe> -DFILTER=<catch2 filter> -DFIRST=1 -DLAST=20 [-DMAX_DELAY_US=n] -P run_seeds.cmake
if(NOT DEFINED FIRST)
  set(FIRST 1)
endif()
set(failed "")
foreach(seed RANGE ${FIRST} ${LAST})
  set(env "DEVICEKIT_SIM_SEED=${seed}")
  if(DEFINED MAX_DELAY_US)
    list(APPEND env "DEVICEKIT_SIM_MAX_DELAY_US=${MAX_DELAY_US}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${EXE} ${FILTER}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message("seed ${seed} failed (exit ${rc}); replay: ${env} DEVICEKIT_SIM_GPUS=$ENV{DEVICEKIT_SIM_GPUS} ${EXE} \"${FILTER}\"\n${out}\n${err}")
    list(APPEND failed ${seed})
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "failed under seeds: ${failed}")
endif()
message("passed under seeds ${FIRST}..${LAST}")
