/*
 * ACL profiling around an HCCL AllReduce loop, threads as ranks: the main
 * thread initializes profiling into a directory and starts it on every
 * device (aclprofInit, aclprofCreateConfig, aclprofStart); each rank thread
 * then joins the communicator (created after the start: profiling still
 * records it), runs an AllReduce loop on its stream and checks the data;
 * aclprofStop writes each device's timeline (Chrome trace / Perfetto JSON:
 * every stream task and a span per AllReduce) to
 * DIR/hccl_prof_dev<id>_<pid>.json, whose paths are printed and checked.
 *
 * Build: gcc -Wall -Werror prof_allreduce.c $(pkg-config --cflags --libs hccl) -lmsprofiler -lpthread
 * Run:   ./prof_allreduce [dir] [nranks] [count] [iters]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <acl/acl.h>
#include <acl/acl_prof.h>
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
    uint32_t iters;
    const HcclRootInfo *root;
    int failures;
};

static void *rank_main(void *p)
{
    struct Args *a = (struct Args *)p;
    uint64_t n = a->count, i;
    size_t bytes = n * sizeof(float);
    uint32_t it;
    HcclComm comm;
    aclrtStream stream;
    float *send, *recv, *host;

    CHECK_ACL(aclrtSetDevice((int32_t)a->rank));
    CHECK_ACL(aclrtCreateStream(&stream));
    CHECK_HCCL(HcclCommInitRootInfo(a->nranks, a->root, a->rank, &comm));
    CHECK_ACL(aclrtMalloc((void **)&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes));

    /* iteration t: rank r contributes (r + 1 + t) * (i % 5); the sum is
     * (p(p+1)/2 + p t) * (i % 5) */
    for (it = 0; it < a->iters; it++) {
        for (i = 0; i < n; i++) {
            host[i] = (float)((a->rank + 1 + it) * (i % 5));
        }
        CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK_HCCL(HcclAllReduce(send, recv, n, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        for (i = 0; i < n; i++) {
            float want = (float)((a->nranks * (a->nranks + 1) / 2 + a->nranks * it) * (i % 5));
            if (host[i] != want) {
                fprintf(stderr, "rank %u iter %u: allreduce[%lu] = %f, want %f\n", a->rank, it,
                        (unsigned long)i, host[i], want);
                a->failures++;
                break;
            }
        }
    }

    CHECK_ACL(aclrtFreeHost(host));
    CHECK_ACL(aclrtFree(recv));
    CHECK_ACL(aclrtFree(send));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclrtResetDevice((int32_t)a->rank));
    return NULL;
}

/* Whether the file at path holds a trace with an AllReduce op span. */
static int has_allreduce_spans(const char *path)
{
    FILE *f = fopen(path, "rb");
    long size;
    char *text;
    int found;

    if (f == NULL) {
        return 0;
    }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = (char *)malloc((size_t)size + 1);
    if (text == NULL || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(text);
        return 0;
    }
    text[size] = '\0';
    fclose(f);
    found = strstr(text, "\"traceEvents\"") != NULL && strstr(text, "\"name\":\"AllReduce\"") != NULL &&
            strstr(text, "\"cat\":\"op\"") != NULL;
    free(text);
    return found;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "./hccl_prof";
    uint32_t nranks = argc > 2 ? (uint32_t)atoi(argv[2]) : 4, r;
    uint64_t count = argc > 3 ? (uint64_t)atoll(argv[3]) : 1000;
    uint32_t iters = argc > 4 ? (uint32_t)atoi(argv[4]) : 10;
    uint32_t ndev = 0, devices[64];
    aclprofConfig *config;
    HcclRootInfo root;
    pthread_t threads[64];
    struct Args args[64];
    char path[4096];
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

    /* profile every rank's device, from before its communicator exists */
    CHECK_ACL(aclprofInit(dir, strlen(dir)));
    for (r = 0; r < nranks; r++) {
        devices[r] = r;
    }
    config = aclprofCreateConfig(devices, nranks, ACL_AICORE_NONE, NULL,
                                 ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_HCCL_TRACE);
    if (config == NULL) {
        fprintf(stderr, "aclprofCreateConfig failed\n");
        return 1;
    }
    CHECK_ACL(aclprofStart(config));

    CHECK_ACL(aclrtSetDevice(0));
    CHECK_HCCL(HcclGetRootInfo(&root));
    for (r = 0; r < nranks; r++) {
        args[r].rank = r;
        args[r].nranks = nranks;
        args[r].count = count;
        args[r].iters = iters;
        args[r].root = &root;
        args[r].failures = 0;
        pthread_create(&threads[r], NULL, rank_main, &args[r]);
    }
    for (r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        failures += args[r].failures;
    }

    /* every stream was synchronized: the timelines hold every AllReduce */
    CHECK_ACL(aclprofStop(config));
    for (r = 0; r < nranks; r++) {
        snprintf(path, sizeof path, "%s/hccl_prof_dev%u_%ld.json", dir, r, (long)getpid());
        if (!has_allreduce_spans(path)) {
            fprintf(stderr, "device %u: %s has no AllReduce spans\n", r, path);
            failures++;
        } else {
            printf("device %u: trace %s\n", r, path);
        }
    }
    CHECK_ACL(aclprofDestroyConfig(config));
    CHECK_ACL(aclprofFinalize());
    CHECK_ACL(aclFinalize());
    if (failures) {
        printf("FAILED: %d check(s) failed\n", failures);
        return 1;
    }
    printf("OK: %u thread ranks, %u AllReduces of %lu floats checked and profiled (open the traces in "
           "https://ui.perfetto.dev)\n",
           nranks, iters, (unsigned long)count);
    return 0;
}
