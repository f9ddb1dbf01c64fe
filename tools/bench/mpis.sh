# Sourced by compare.sh and compare-hosts.sh: finds the MPIs to compare
# with and builds tools/bench/mpi_bench.c with each one's own compiler
# wrapper, into target/bench/mpi_bench.<mpi>.
#
#   MPIS="openmpi mpich"  the MPIs (default: those whose mpicc.<mpi> is installed)
#
# build_mpi_bench NAME: sets MPIS and builds, or exits saying what to
# install (NAME: the calling script, for the message).
build_mpi_bench() {
    if [ -z "${MPIS:-}" ]; then
        MPIS=""
        command -v mpicc.openmpi >/dev/null && MPIS="openmpi"
        command -v mpicc.mpich >/dev/null && MPIS="$MPIS mpich"
    fi
    [ -n "$MPIS" ] || {
        echo "$1: needs Open MPI (apt-get install -y openmpi-bin libopenmpi-dev) and/or MPICH (mpich libmpich-dev)" >&2
        exit 1
    }
    mkdir -p target/bench
    local m
    for m in $MPIS; do
        "mpicc.$m" -O2 -Wall -Werror -o "target/bench/mpi_bench.$m" tools/bench/mpi_bench.c
    done
}
