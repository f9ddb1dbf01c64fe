/*
 * Threads as ranks: one process, one thread per device, each thread joins
 * the communicator with HcclCommInitRootInfo (as HCCL's own samples do),
 * then runs an AllReduce, a Broadcast and an AllGather on its stream and
 * checks the results.
 *
 * Build: gcc -Wall -Werror allreduce_threads.c $(pkg-config --cflags --libs hccl) -lpthread
 * Run:   ./allreduce_threads [nranks] [count]
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
    const HcclRootInfo *root;
    int failures;
};

static void *rank_main(void *p)
{
    struct Args *a = (struct Args *)p;
    uint64_t n = a->count, i;
    size_t bytes = n * sizeof(float);
    HcclComm comm;
    aclrtStream stream;
    float *send, *recv, *host;
    uint32_t size = 0, id = 0;

    CHECK_ACL(aclrtSetDevice((int32_t)a->rank));
    CHECK_ACL(aclrtCreateStream(&stream));
    CHECK_HCCL(HcclCommInitRootInfo(a->nranks, a->root, a->rank, &comm));
    CHECK_HCCL(HcclGetRankSize(comm, &size));
    CHECK_HCCL(HcclGetRankId(comm, &id));
    if (size != a->nranks || id != a->rank) {
        fprintf(stderr, "rank %u: size %u id %u\n", a->rank, size, id);
        a->failures++;
    }

    CHECK_ACL(aclrtMalloc((void **)&send, bytes * a->nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&recv, bytes * a->nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes * a->nranks));

    /* AllReduce: rank r contributes (r + 1) * (i % 7); the sum is (p(p+1)/2) * (i % 7). */
    for (i = 0; i < n; i++) {
        host[i] = (float)((a->rank + 1) * (i % 7));
    }
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAllReduce(send, recv, n, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n; i++) {
        float want = (float)(a->nranks * (a->nranks + 1) / 2 * (i % 7));
        if (host[i] != want) {
            fprintf(stderr, "rank %u: allreduce[%lu] = %f, want %f\n", a->rank, (unsigned long)i, host[i], want);
            a->failures++;
            break;
        }
    }

    /* Broadcast from the last rank, in place. */
    for (i = 0; i < n; i++) {
        host[i] = a->rank == a->nranks - 1 ? (float)i : -1.0f;
    }
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclBroadcast(send, n, HCCL_DATA_TYPE_FP32, a->nranks - 1, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, send, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n; i++) {
        if (host[i] != (float)i) {
            fprintf(stderr, "rank %u: broadcast[%lu] = %f\n", a->rank, (unsigned long)i, host[i]);
            a->failures++;
            break;
        }
    }

    /* AllGather: block r holds r everywhere. */
    for (i = 0; i < n; i++) {
        host[i] = (float)a->rank;
    }
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAllGather(send, recv, n, HCCL_DATA_TYPE_FP32, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes * a->nranks, recv, bytes * a->nranks, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n * a->nranks; i++) {
        if (host[i] != (float)(i / n)) {
            fprintf(stderr, "rank %u: allgather[%lu] = %f\n", a->rank, (unsigned long)i, host[i]);
            a->failures++;
            break;
        }
    }

    CHECK_HCCL(HcclBarrier(comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtFreeHost(host));
    CHECK_ACL(aclrtFree(recv));
    CHECK_ACL(aclrtFree(send));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclrtResetDevice((int32_t)a->rank));
    return NULL;
}

int main(int argc, char **argv)
{
    uint32_t nranks = argc > 1 ? (uint32_t)atoi(argv[1]) : 4, r;
    uint64_t count = argc > 2 ? (uint64_t)atoll(argv[2]) : 1000;
    uint32_t ndev = 0;
    HcclRootInfo root;
    pthread_t threads[64];
    struct Args args[64];
    int failures = 0;

    if (nranks == 0 || nranks > 64) {
        fprintf(stderr, "nranks must be 1..64\n");
        return 2;
    }
    CHECK_ACL(aclInit(NULL));
    CHECK_ACL(aclrtGetDeviceCount(&ndev));
    if (nranks > ndev) {
        fprintf(stderr, "%u ranks but only %u devices (set HCCL_RS_DEVICE_COUNT)\n", nranks, ndev);
        return 2;
    }
    CHECK_ACL(aclrtSetDevice(0));
    CHECK_HCCL(HcclGetRootInfo(&root));
    for (r = 0; r < nranks; r++) {
        args[r].rank = r;
        args[r].nranks = nranks;
        args[r].count = count;
        args[r].root = &root;
        args[r].failures = 0;
        pthread_create(&threads[r], NULL, rank_main, &args[r]);
    }
    for (r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        failures += args[r].failures;
    }
    CHECK_ACL(aclFinalize());
    if (failures) {
        printf("FAILED: %d check(s) failed\n", failures);
        return 1;
    }
    printf("OK: %u thread ranks, allreduce/broadcast/allgather of %lu floats checked\n", nranks,
           (unsigned long)count);
    return 0;
}
