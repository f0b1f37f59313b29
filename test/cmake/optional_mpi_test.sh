#!/usr/bin/env bash
# An MPI compiler wrapper without MPI's headers (Debian's openmpi-bin without
# libopenmpi-dev) must cost one status line at configure, never an error.
#   optional_mpi_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work/bin"
# Answers FindMPI's Open MPI queries with an include folder that does not
# exist, as the real wrapper does without libopenmpi-dev, and compiles
# without <mpi.h>.
cat >"$work/bin/mpicxx" <<'WRAPPER'
#!/bin/sh
inc=/nonexistent/openmpi/include
case "$1" in
  -showme:compile) echo "-I$inc -pthread" ;;
  -showme:link) echo "-pthread -lmpi" ;;
  -showme:incdirs) echo "$inc" ;;
  -showme:libdirs) echo "" ;;
  -showme:libs) echo "mpi" ;;
  -showme:version) echo "mpicxx: Open MPI 4.1.4 (Language: C++)" ;;
  -showme*) echo "g++ -I$inc -pthread -lmpi" ;;
  *) exec g++ -I"$inc" "$@" ;;
esac
WRAPPER
chmod +x "$work/bin/mpicxx"
export PATH="$work/bin:$PATH"

configure() {  # $1: ON (the probe) or OFF (FindMPI alone); $2: build dir
  cmake -S "$src/test/cmake/optional_mpi" -B "$2" -DSINKRT_SOURCE_DIR="$src" -DSINKRT_PROBE="$1" \
        -DMPI_CXX_COMPILER="$work/bin/mpicxx" >"$2.log" 2>&1
}

# The control: FindMPI alone stops configure on this wrapper. If it ever
# stops doing so, the fake no longer reproduces the failure.
if configure OFF "$work/direct"; then
  echo "control: FindMPI accepted the broken wrapper; the test no longer reproduces the failure" >&2
  cat "$work/direct.log" >&2
  exit 1
fi
grep -q "non-existent path" "$work/direct.log" || { echo "control failed for another reason:" >&2; cat "$work/direct.log" >&2; exit 1; }

configure ON "$work/probed" || { echo "configure failed with the probe:" >&2; cat "$work/probed.log" >&2; exit 1; }
grep -q "cannot compile <mpi.h>" "$work/probed.log" || { echo "no status line naming the missing headers:" >&2; cat "$work/probed.log" >&2; exit 1; }
grep -q "HAVE_MPI=FALSE" "$work/probed.log" || { echo "MPI reported usable:" >&2; cat "$work/probed.log" >&2; exit 1; }
echo "optional_mpi_test: a wrapper without headers is skipped with one status line"
