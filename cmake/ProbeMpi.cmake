# sinkrt_find_optional_mpi(<out-var>): finds MPI's C API for C++ (the target
# MPI::MPI_CXX) and sets <out-var> TRUE, or prints one status line and sets
# it FALSE. Never a configure error: MPI is optional here.
#
# FindMPI trusts the compiler wrapper it finds: Open MPI's mpicxx installed
# without its headers (Debian's openmpi-bin without libopenmpi-dev) makes it
# build an imported target whose include folder does not exist, and configure
# stops. So the wrapper must first prove that it compiles <mpi.h>.
function(sinkrt_find_optional_mpi out_var)
  set(${out_var} FALSE PARENT_SCOPE)
  find_program(SINKRT_MPICXX NAMES mpicxx mpic++ mpiCC)
  if(NOT SINKRT_MPICXX)
    message(STATUS "MPI: no compiler wrapper (mpicxx) on PATH")
    return()
  endif()
  set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/sinkrt_mpi_probe)
  file(MAKE_DIRECTORY ${probe_dir})
  file(WRITE ${probe_dir}/probe.cc "#include <mpi.h>\nint main() { return MPI_SUCCESS; }\n")
  execute_process(COMMAND ${SINKRT_MPICXX} -fsyntax-only ${probe_dir}/probe.cc
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(STATUS "MPI: ${SINKRT_MPICXX} cannot compile <mpi.h> (its headers are not installed)")
    return()
  endif()
  # The C API from C++, without the deprecated C++ bindings.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(${out_var} TRUE PARENT_SCOPE)
    set(MPI_CXX_VERSION ${MPI_CXX_VERSION} PARENT_SCOPE)
  else()
    message(STATUS "MPI: FindMPI did not find MPI's C++ component")
  endif()
endfunction()
