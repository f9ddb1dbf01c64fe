/*
 * ACL graphs, threads as ranks: every rank captures an AllReduce, an
 * AllGather and a Broadcast on its stream once (aclmdlRICaptureBegin ...
 * aclmdlRICaptureEnd), then executes the captured model run instance many
 * times (aclmdlRIExecuteAsync), rewriting its inputs before every
 * execution and checking every result.
 *
 * The communicators come from HcclCommInitAll (one per device, as HCCL's
 * own graph-mode samples set them up); each thread then works on its
 * device. Each rank captures in THREAD_LOCAL mode: only its own thread is
 * barred from the synchronous copies while it captures, so the other
 * ranks may keep writing their inputs.
 *
 * Build: gcc -Wall -Werror graph_capture.c $(pkg-config --cflags --libs hccl) -lpthread
 * Run:   ./graph_capture [nranks] [count] [executions]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <hccl/hccl.h>

#define CHECK_ACL(x)                                                              \
    do {                                                                          \
        aclError e_ = (x);                                                        \
        if (e_ != ACL_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, e_); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

#define CHECK_HCCL(x)                                                                       \
    do {                                                                                    \
        HcclResult r_ = (x);                                                                \
        if (r_ != HCCL_SUCCESS) {                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,               \
                    HcclGetErrorString(r_));                                                \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

struct Args {
    uint32_t rank;
    uint32_t nranks;
    uint64_t count;
    int executions;
    HcclComm comm;
    int failures;
};

/* Rank r's element i at execution k. */
static int32_t value(uint32_t r, uint64_t i, int k)
{
    return (int32_t)((r + 1) * 1000 + (i % 977) * 3 + (uint64_t)k * 7);
}

static void *rank_main(void *p)
{
    struct Args *a = (struct Args *)p;
    uint64_t n = a->count, i;
    uint32_t q, root = a->nranks - 1;
    size_t bytes = n * sizeof(int32_t);
    aclrtStream stream;
    aclmdlRI model = NULL, during = NULL;
    aclmdlRICaptureStatus status;
    int32_t *send, *sum, *all, *bcast, *host;
    int k;

    CHECK_ACL(aclrtSetDevice((int32_t)a->rank));
    CHECK_ACL(aclrtCreateStream(&stream));
    CHECK_ACL(aclrtMalloc((void **)&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&sum, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&all, bytes * a->nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&bcast, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes * a->nranks));

    /* Capture: the calls are recorded, not run. */
    CHECK_ACL(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL));
    CHECK_HCCL(HcclAllReduce(send, sum, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, a->comm, stream));
    CHECK_HCCL(HcclAllGather(send, all, n, HCCL_DATA_TYPE_INT32, a->comm, stream));
    CHECK_HCCL(HcclBroadcast(bcast, n, HCCL_DATA_TYPE_INT32, root, a->comm, stream));
    CHECK_ACL(aclmdlRICaptureGetInfo(stream, &status, &during));
    if (status != ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE || during == NULL) {
        fprintf(stderr, "rank %u: capture status %d\n", a->rank, (int)status);
        a->failures++;
    }
    CHECK_ACL(aclmdlRICaptureEnd(stream, &model));
    CHECK_ACL(aclmdlRISetName(model, "allreduce-allgather-broadcast"));

    /* Replay: new inputs before every execution, every result checked. */
    for (k = 0; k < a->executions && !a->failures; k++) {
        for (i = 0; i < n; i++) host[i] = value(a->rank, i, k);
        CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        for (i = 0; i < n; i++) host[i] = a->rank == root ? value(root, i, k) + 1 : -1;
        CHECK_ACL(aclrtMemcpy(bcast, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK_ACL(aclmdlRIExecuteAsync(model, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));

        CHECK_ACL(aclrtMemcpy(host, bytes, sum, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n; i++) {
            int32_t want = 0;
            for (q = 0; q < a->nranks; q++) want += value(q, i, k);
            if (host[i] != want) {
                fprintf(stderr, "rank %u execution %d: allreduce[%lu] = %d, want %d\n", a->rank, k,
                        (unsigned long)i, host[i], want);
                a->failures++;
                break;
            }
        }
        CHECK_ACL(aclrtMemcpy(host, bytes * a->nranks, all, bytes * a->nranks, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n * a->nranks; i++) {
            if (host[i] != value((uint32_t)(i / n), i % n, k)) {
                fprintf(stderr, "rank %u execution %d: allgather[%lu] = %d\n", a->rank, k,
                        (unsigned long)i, host[i]);
                a->failures++;
                break;
            }
        }
        CHECK_ACL(aclrtMemcpy(host, bytes, bcast, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n; i++) {
            if (host[i] != value(root, i, k) + 1) {
                fprintf(stderr, "rank %u execution %d: broadcast[%lu] = %d\n", a->rank, k,
                        (unsigned long)i, host[i]);
                a->failures++;
                break;
            }
        }
    }

    CHECK_ACL(aclmdlRIDestroy(model));
    CHECK_ACL(aclrtFreeHost(host));
    CHECK_ACL(aclrtFree(bcast));
    CHECK_ACL(aclrtFree(all));
    CHECK_ACL(aclrtFree(sum));
    CHECK_ACL(aclrtFree(send));
    CHECK_ACL(aclrtDestroyStream(stream));
    return NULL;
}

int main(int argc, char **argv)
{
    uint32_t nranks = argc > 1 ? (uint32_t)atoi(argv[1]) : 4, r;
    uint64_t count = argc > 2 ? (uint64_t)atoll(argv[2]) : 1000;
    int executions = argc > 3 ? atoi(argv[3]) : 100;
    uint32_t ndev = 0;
    int32_t devices[64];
    HcclComm comms[64];
    pthread_t threads[64];
    struct Args args[64];
    int failures = 0;

    if (nranks == 0 || nranks > 64 || executions < 1) {
        fprintf(stderr, "nranks must be 1..64 and executions at least 1\n");
        return 2;
    }
    CHECK_ACL(aclInit(NULL));
    CHECK_ACL(aclrtGetDeviceCount(&ndev));
    if (nranks > ndev) {
        fprintf(stderr, "%u ranks but only %u devices (set HCCL_RS_DEVICE_COUNT)\n", nranks, ndev);
        return 2;
    }
    for (r = 0; r < nranks; r++) devices[r] = (int32_t)r;
    CHECK_HCCL(HcclCommInitAll(nranks, devices, comms));
    for (r = 0; r < nranks; r++) {
        args[r].rank = r;
        args[r].nranks = nranks;
        args[r].count = count;
        args[r].executions = executions;
        args[r].comm = comms[r];
        args[r].failures = 0;
        pthread_create(&threads[r], NULL, rank_main, &args[r]);
    }
    for (r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        failures += args[r].failures;
    }
    for (r = 0; r < nranks; r++) CHECK_HCCL(HcclCommDestroy(comms[r]));
    CHECK_ACL(aclFinalize());
    if (failures) {
        printf("FAILED: %d check(s) failed\n", failures);
        return 1;
    }
    printf("OK: %u thread ranks, a captured allreduce/allgather/broadcast of %lu int32 executed %d times, checked\n",
           nranks, (unsigned long)count, executions);
    return 0;
}
