/*
 * ACL graphs, one rank per process under mpirun: every rank joins with
 * HcclCommInitRootInfo (MPI carries the root info), warms up with one
 * AllReduce, then captures an AllReduce, an AllGather and a Broadcast on
 * its stream (aclmdlRICaptureBegin ... aclmdlRICaptureEnd, GLOBAL mode)
 * and executes the captured model run instance many times
 * (aclmdlRIExecuteAsync), rewriting its inputs before every execution and
 * checking every result. Optionally (third argument: rounds) it also times
 * a loop of `batch` (fourth argument, default 16) 8-byte AllReduces issued
 * op by op and synchronized, against the same loop captured once and
 * executed as one instance, per op: p50 / p99 / max over the rounds.
 *
 * Build: mpicc -Wall -Werror graph_capture_mpi.c $(pkg-config --cflags --libs hccl)
 * Run:   mpirun -np 4 ./graph_capture_mpi [count] [executions] [rounds] [batch]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <hccl/hccl.h>

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "rank %d: ", rank);                          \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, "\n");                                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                \
        }                                                                \
    } while (0)
#define CHECK_ACL(x)                                            \
    do {                                                        \
        aclError e_ = (x);                                      \
        CHECK(e_ == ACL_SUCCESS, "%s failed: %d", #x, e_);      \
    } while (0)
#define CHECK_HCCL(x)                                                            \
    do {                                                                         \
        HcclResult r_ = (x);                                                     \
        CHECK(r_ == HCCL_SUCCESS, "%s failed: %s", #x, HcclGetErrorString(r_)); \
    } while (0)

static int rank = 0;

static int32_t value(int r, uint64_t i, int k)
{
    return (int32_t)((r + 1) * 1000 + (i % 977) * 3 + (uint64_t)k * 7);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Per-op times of `reps` rounds of `batch` ops: p50, p99, max (us). */
static void report(const char *what, double *t, int reps, int batch)
{
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    printf("%-28s per op: p50 %8.2f us  p99 %8.2f us  max %8.2f us  (%d rounds of %d ops)\n", what,
           t[reps / 2] / batch, t[(reps * 99) / 100] / batch, t[reps - 1] / batch, reps, batch);
}

/* An 8-byte AllReduce loop: op by op vs the same loop captured once. */
static void measure(HcclComm comm, aclrtStream stream, int reps, int BATCH)
{
    float *x, *y;
    double *t_ops = malloc(sizeof(double) * (size_t)reps), *t_graph = malloc(sizeof(double) * (size_t)reps);
    aclmdlRI loop = NULL;
    int i, j;

    CHECK(t_ops && t_graph, "out of memory");
    CHECK_ACL(aclrtMalloc((void **)&x, 8, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&y, 8, ACL_MEM_MALLOC_HUGE_FIRST));
    for (i = 0; i < 200; i++) CHECK_HCCL(HcclAllReduce(x, y, 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < reps; i++) {
        double t0 = now_us();
        for (j = 0; j < BATCH; j++)
            CHECK_HCCL(HcclAllReduce(x, y, 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        t_ops[i] = now_us() - t0;
    }
    CHECK_ACL(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    for (j = 0; j < BATCH; j++)
        CHECK_HCCL(HcclAllReduce(x, y, 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclmdlRICaptureEnd(stream, &loop));
    for (i = 0; i < 50; i++) CHECK_ACL(aclmdlRIExecuteAsync(loop, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < reps; i++) {
        double t0 = now_us();
        CHECK_ACL(aclmdlRIExecuteAsync(loop, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        t_graph[i] = now_us() - t0;
    }
    if (rank == 0) {
        report("8 B AllReduce, op by op", t_ops, reps, BATCH);
        report("8 B AllReduce, graph replay", t_graph, reps, BATCH);
    }
    CHECK_ACL(aclmdlRIDestroy(loop));
    CHECK_ACL(aclrtFree(y));
    CHECK_ACL(aclrtFree(x));
    free(t_graph);
    free(t_ops);
}

int main(int argc, char **argv)
{
    int nranks = 0, local = 0, root, k, bad = 0;
    uint64_t n = argc > 1 ? (uint64_t)atoll(argv[1]) : 4096, i;
    int executions = argc > 2 ? atoi(argv[2]) : 100;
    int timed = argc > 3 ? atoi(argv[3]) : 0;
    int batch = argc > 4 ? atoi(argv[4]) : 16;
    uint32_t ndev = 0;
    HcclRootInfo info;
    HcclComm comm;
    aclrtStream stream;
    aclmdlRI model = NULL;
    int32_t *send, *sum, *all, *bcast, *host;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    size_t bytes;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    local = lr ? atoi(lr) : rank;
    bytes = n * sizeof(int32_t);
    root = nranks - 1;

    CHECK_ACL(aclInit(NULL));
    CHECK_ACL(aclrtGetDeviceCount(&ndev));
    CHECK_ACL(aclrtSetDevice(local % (int)ndev));
    CHECK_ACL(aclrtCreateStream(&stream));
    if (rank == 0) CHECK_HCCL(HcclGetRootInfo(&info));
    MPI_Bcast(&info, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK_HCCL(HcclCommInitRootInfo((uint32_t)nranks, &info, (uint32_t)rank, &comm));

    CHECK_ACL(aclrtMalloc((void **)&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&sum, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&all, bytes * (size_t)nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&bcast, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes * (size_t)nranks));

    /* A warm-up op, as graph-mode programs run one before capturing. */
    CHECK_HCCL(HcclAllReduce(send, sum, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));

    CHECK_ACL(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    CHECK_HCCL(HcclAllReduce(send, sum, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_HCCL(HcclAllGather(send, all, n, HCCL_DATA_TYPE_INT32, comm, stream));
    CHECK_HCCL(HcclBroadcast(bcast, n, HCCL_DATA_TYPE_INT32, (uint32_t)root, comm, stream));
    CHECK_ACL(aclmdlRICaptureEnd(stream, &model));

    for (k = 0; k < executions; k++) {
        for (i = 0; i < n; i++) host[i] = value(rank, i, k);
        CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        for (i = 0; i < n; i++) host[i] = rank == root ? -value(root, i, k) : 0;
        CHECK_ACL(aclrtMemcpy(bcast, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK_ACL(aclmdlRIExecuteAsync(model, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));

        CHECK_ACL(aclrtMemcpy(host, bytes, sum, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n && !bad; i++) {
            int32_t want = 0;
            int q;
            for (q = 0; q < nranks; q++) want += value(q, i, k);
            bad = host[i] != want;
        }
        CHECK(!bad, "execution %d: allreduce mismatch at %lu: %d", k, (unsigned long)(i - 1), host[i - 1]);
        CHECK_ACL(aclrtMemcpy(host, bytes * (size_t)nranks, all, bytes * (size_t)nranks, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n * (uint64_t)nranks && !bad; i++) bad = host[i] != value((int)(i / n), i % n, k);
        CHECK(!bad, "execution %d: allgather mismatch at %lu: %d", k, (unsigned long)(i - 1), host[i - 1]);
        CHECK_ACL(aclrtMemcpy(host, bytes, bcast, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n && !bad; i++) bad = host[i] != -value(root, i, k);
        CHECK(!bad, "execution %d: broadcast mismatch at %lu: %d", k, (unsigned long)(i - 1), host[i - 1]);
    }
    CHECK_ACL(aclmdlRIDestroy(model));
    if (timed > 0 && batch > 0) measure(comm, stream, timed, batch);

    CHECK_ACL(aclrtFreeHost(host));
    CHECK_ACL(aclrtFree(bcast));
    CHECK_ACL(aclrtFree(all));
    CHECK_ACL(aclrtFree(sum));
    CHECK_ACL(aclrtFree(send));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclFinalize());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("OK: %d MPI ranks, a captured allreduce/allgather/broadcast of %lu int32 executed %d times, checked\n",
               nranks, (unsigned long)n, executions);
    MPI_Finalize();
    return 0;
}
