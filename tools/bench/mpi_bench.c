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
 * fp32; the time is the slowest rank's average per op. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    memset(s, 0, cap);
    memset(r, 0, cap);
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
