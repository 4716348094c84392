# devicekit_add_mpi_test(<name> <np> <command> [args...])
# Registers a CTest test that runs <command> under mpirun with <np> processes, label 'mpi'.
#  - --oversubscribe: CI has 2 cores and the tests use up to 4 processes;
#  - --allow-run-as-root when configured as root (CI runs as root; Open MPI refuses otherwise);
#  - Open MPI kept on shared memory without CMA (containers often forbid process_vm_readv) and
#    on loopback for its out-of-band channel, with no process binding (oversubscribed).
set(DEVICEKIT_MPIRUN_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _devicekit_uid OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_devicekit_uid STREQUAL "0")
  list(APPEND DEVICEKIT_MPIRUN_FLAGS --allow-run-as-root)
endif()
set(DEVICEKIT_MPI_TEST_ENVIRONMENT
    "OMPI_MCA_btl=self,vader,tcp"
    "OMPI_MCA_btl_vader_single_copy_mechanism=none"
    "OMPI_MCA_btl_tcp_if_include=lo"
    "OMPI_MCA_oob_tcp_if_include=lo"
    "OMPI_MCA_hwloc_base_binding_policy=none"
    "OMPI_MCA_rmaps_base_oversubscribe=1"
    "OMPI_MCA_mpi_yield_when_idle=1"
    "PMIX_MCA_gds=hash")

function(devicekit_add_mpi_test name np)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${DEVICEKIT_MPIRUN_FLAGS} ${MPIEXEC_PREFLAGS}
                   ${ARGN} ${MPIEXEC_POSTFLAGS})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS ${np}
                                          ENVIRONMENT "${DEVICEKIT_MPI_TEST_ENVIRONMENT}")
endfunction()
