/* A small MPI collective benchmark printing hccl-test's table, so
 * tools/bench/compare.sh can put Open MPI and hccl-rs side by side.
 *
 *   mpirun -np 4 ./mpi_bench all_reduce 8 67108864 2 20 5 [spread]
 *   (op, minbytes, maxbytes, stepfactor, iters, warmup)
 *
 * With spread = 1 a second pass times each of iters ops on its own, as
 * hccl-test's does: an iteration's time is the slowest rank's (a
 * max-reduction), and p50 / p99 / max of them are printed as hccl-test's
 * last three columns (nearest rank).
 *
 * Sizes follow nccl-tests / hccl-test: all_gather counts the gathered
 * output, reduce_scatter / scatter / alltoall the whole input. Data is
 * fp32; the time is the slowest rank's average per op.
 *
 * Buffers hold real data: every element of the send buffer is a value
 * that differs by rank and position, the receive buffer another, written
 * before timing, and every page of both is checked resident (mincore)
 * before the first op. Zeroed buffers would not do: malloc + memset(0)
 * becomes calloc, whose untouched pages all map the kernel's one zero
 * page, and a single-copy read from them runs from one cached 4 KiB page
 * (issue 30: Open MPI's 64 MiB Broadcast measured 2.4x faster that way). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* nearest rank: the smallest value with at least q*n values at or below it */
static double pct(const double *v, int n, double q) {
    int i = (int)(q * n + 0.999999999);
    if (i < 1) i = 1;
    if (i > n) i = n;
    return v[i - 1];
}

static double bus_factor(const char *op, int p) {
    if (!strcmp(op, "all_reduce")) return 2.0 * (p - 1) / p;
    if (!strcmp(op, "broadcast") || !strcmp(op, "reduce")) return 1.0;
    return (double)(p - 1) / p;
}

/* Fills n floats with values that differ by rank, buffer and position
 * (never zero), touching every page. */
static void fill(float *v, size_t n, int rank, int which) {
    for (size_t i = 0; i < n; i++) v[i] = (float)(((i * 2654435761u) ^ (unsigned)(rank * 131 + which * 7)) % 1000 + 1);
}

/* How many of the pages of [p, p + len) are resident. */
static size_t resident(const void *p, size_t len) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t span = (uintptr_t)p + len - a, pages = (span + page - 1) / page, n = 0;
    unsigned char *vec = malloc(pages);
    if (!vec || mincore((void *)a, span, vec) != 0) {
        free(vec);
        return 0;
    }
    for (size_t i = 0; i < pages; i++) n += vec[i] & 1;
    free(vec);
    return n == pages ? len : n * (size_t)page;
}

static int split(const char *op) {
    return !strcmp(op, "all_gather") || !strcmp(op, "reduce_scatter") || !strcmp(op, "scatter") ||
           !strcmp(op, "alltoall");
}

static void run(const char *op, float *s, float *r, int c, int p) {
    if (!strcmp(op, "all_reduce")) MPI_Allreduce(s, r, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "all_gather")) MPI_Allgather(s, c, MPI_FLOAT, r, c, MPI_FLOAT, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce_scatter")) MPI_Reduce_scatter_block(s, r, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "broadcast")) MPI_Bcast(s, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce")) MPI_Reduce(s, r, c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "scatter")) MPI_Scatter(s, c, MPI_FLOAT, r, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "alltoall")) MPI_Alltoall(s, c, MPI_FLOAT, r, c, MPI_FLOAT, MPI_COMM_WORLD);
    (void)p;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (argc < 7) {
        if (!rank) fprintf(stderr, "usage: mpi_bench op minbytes maxbytes factor iters warmup\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *op = argv[1];
    long minb = atol(argv[2]), maxb = atol(argv[3]), f = atol(argv[4]);
    int iters = atoi(argv[5]), warm = atoi(argv[6]);
    int spread = argc > 7 && atoi(argv[7]) == 1;
    double *it = calloc(iters > 0 ? iters : 1, sizeof(double)), *it_max = calloc(iters > 0 ? iters : 1, sizeof(double));
    size_t cap = (size_t)maxb * (split(op) ? 1 : p) + 64;
    float *s = malloc(cap), *r = malloc(cap);
    if (!s || !r) {
        fprintf(stderr, "mpi_bench: cannot allocate %zu bytes\n", cap);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* MPI_BENCH_NO_FILL=1 leaves them untouched: only for the test that
     * shows the residency check catches it */
    if (!getenv("MPI_BENCH_NO_FILL")) {
        fill(s, cap / sizeof(float), rank, 0);
        fill(r, cap / sizeof(float), rank, 1);
    }
    if (resident(s, cap) != cap || resident(r, cap) != cap) {
        fprintf(stderr, "mpi_bench: rank %d: the buffers are not resident after filling them\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    /* on stderr: the scripts read the table from stdout by line number */
    if (!rank) fprintf(stderr, "mpi_bench: buffers of %zu bytes each, filled with per-rank non-zero data, every page resident\n", cap);
    if (!rank) {
        printf("the minbytes is %ld, maxbytes is %ld, iters is %d, warmup_iters is %d\n", minb, maxb, iters, warm);
        printf("%18s | %16s | %22s | %14s | %20s", "data_size(Bytes):", "aveg_time(us):", "alg_bandwidth(GB/s):",
               "check_result:", "bus_bandwidth(GB/s):");
        if (spread) printf(" | %14s | %14s | %14s", "p50_time(us):", "p99_time(us):", "max_time(us):");
        printf("\n");
    }
    for (long b = minb; b <= maxb; b *= f) {
        long total = b / 4;
        int c = (int)(split(op) ? total / p : total);
        for (int i = 0; i < warm; i++) run(op, s, r, c, p);
        /* twice, as hccl-test does: the second barrier starts every rank awake */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) run(op, s, r, c, p);
        double us = (MPI_Wtime() - t0) * 1e6 / iters, slowest;
        MPI_Reduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (spread) {
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < iters; i++) {
                double t = MPI_Wtime();
                run(op, s, r, c, p);
                it[i] = (MPI_Wtime() - t) * 1e6;
            }
            MPI_Reduce(it, it_max, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        }
        if (!rank) {
            double algbw = slowest > 0 ? b / slowest / 1e3 : 0;
            printf("%18ld | %16.2f | %22.6f | %14s | %20.6f", b, slowest, algbw, "NULL", algbw * bus_factor(op, p));
            if (spread) {
                qsort(it_max, iters, sizeof(double), cmp_double);
                printf(" | %14.2f | %14.2f | %14.2f", pct(it_max, iters, 0.50), pct(it_max, iters, 0.99),
                       it_max[iters - 1]);
            }
            printf("\n");
            fflush(stdout);
        }
        if (f < 2) break;
    }
    free(s);
    free(r);
    free(it);
    free(it_max);
    MPI_Finalize();
    return 0;
}
