# sinkrt_probe_mpi(<out-var>): TRUE when an MPI compiler wrapper is on PATH
# and compiles a file that includes <mpi.h>, FALSE otherwise, never an error.
#
# FindMPI trusts the wrapper: with Open MPI's mpicxx installed but not its
# headers (Debian's openmpi-bin without libopenmpi-dev) it builds an imported
# target whose include folder does not exist, and configure stops. MPI is
# optional here (one comparison benchmark), so its absence in any form must
# be one status line.
function(sinkrt_probe_mpi out_var)
  set(${out_var} FALSE PARENT_SCOPE)
  find_program(SINKRT_MPICXX NAMES mpicxx mpic++ mpiCC)
  if(NOT SINKRT_MPICXX)
    return()
  endif()
  set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/sinkrt_mpi_probe)
  file(MAKE_DIRECTORY ${probe_dir})
  file(WRITE ${probe_dir}/probe.cc "#include <mpi.h>\nint main() { return MPI_SUCCESS; }\n")
  execute_process(COMMAND ${SINKRT_MPICXX} -fsyntax-only ${probe_dir}/probe.cc
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 60)
  if(rc EQUAL 0)
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    message(STATUS "bench: ${SINKRT_MPICXX} cannot compile <mpi.h> (its headers are not installed)")
  endif()
endfunction()
