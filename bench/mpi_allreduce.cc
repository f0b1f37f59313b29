// OpenMPI's MPI_Allreduce (Debian's openmpi) timed like sinkrt's
// (allreduce_harness.h), for bench/compare_allreduce.
//
//   mpirun -n N --allow-run-as-root --oversubscribe --mca pml ob1
//     --mca btl self,vader mpi_allreduce --transport shm [--sizes ..] [--mlp]
//   mpirun ... --mca btl self,tcp --mca btl_tcp_if_include lo
//     mpi_allreduce --transport tcp ...
//
// The transport is chosen by mpirun's --mca btl; --transport only labels
// the output. In place (MPI_IN_PLACE), float32, MPI_SUM, MPI_COMM_WORLD,
// with Open MPI's own algorithm choice (coll/tuned's fixed decision).
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "allreduce_harness.h"

namespace ah = allreduce_harness;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ah::Args args;
  if (!ah::ParseArgs(argc, argv, args)) {
    if (r == 0) ah::Usage(argv[0], " (under mpirun; --ranks is mpirun's -n)");
    MPI_Finalize();
    return 2;
  }
  args.ranks = n;

  auto allreduce = [](float* p, size_t count) {
    MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  auto slowest = [](double mine) {
    double all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
  };
  auto report = [&](ah::Line line, double my_us) {
    std::vector<double> all(n, 0.0);
    MPI_Gather(&my_us, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    ah::Report(line, all, r);
  };
  const int rc = ah::Sweep(args, r, n, "mpi", "tuned", allreduce, barrier, slowest, report);
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
