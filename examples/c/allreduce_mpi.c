/*
 * One rank per process under mpirun: rank 0 creates the root info, MPI
 * broadcasts it, every rank joins with HcclCommInitRootInfo and runs an
 * AllReduce, a ReduceScatter and an AlltoAll, checked against the expected
 * values. MPI is only the launcher and the root-info carrier.
 *
 * Build: mpicc -Wall -Werror allreduce_mpi.c $(pkg-config --cflags --libs hccl)
 * Run:   mpirun -np 4 ./allreduce_mpi [count]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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
#define CHECK_ACL(x) CHECK((x) == ACL_SUCCESS, "%s failed", #x)
#define CHECK_HCCL(x)                                                            \
    do {                                                                         \
        HcclResult r_ = (x);                                                     \
        CHECK(r_ == HCCL_SUCCESS, "%s failed: %s", #x, HcclGetErrorString(r_)); \
    } while (0)

int main(int argc, char **argv)
{
    int rank = 0, nranks = 0, local = 0;
    uint64_t n = argc > 1 ? (uint64_t)atoll(argv[1]) : 4096, i;
    uint32_t ndev = 0;
    HcclRootInfo root;
    HcclComm comm;
    aclrtStream stream;
    int32_t *send, *recv, *host;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    size_t bytes;
    int bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    local = lr ? atoi(lr) : rank;
    bytes = n * (size_t)nranks * sizeof(int32_t);

    CHECK_ACL(aclInit(NULL));
    CHECK_ACL(aclrtGetDeviceCount(&ndev));
    CHECK_ACL(aclrtSetDevice(local % (int)ndev));
    CHECK_ACL(aclrtCreateStream(&stream));
    if (rank == 0) {
        CHECK_HCCL(HcclGetRootInfo(&root));
    }
    MPI_Bcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK_HCCL(HcclCommInitRootInfo((uint32_t)nranks, &root, (uint32_t)rank, &comm));

    CHECK_ACL(aclrtMalloc((void **)&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes));

    /* AllReduce of n int32: rank r contributes r + i; the sum is p(p-1)/2 + p*i. */
    for (i = 0; i < n; i++) host[i] = (int32_t)(rank + i);
    CHECK_ACL(aclrtMemcpy(send, bytes, host, n * sizeof(int32_t), ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAllReduce(send, recv, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, recv, n * sizeof(int32_t), ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n && !bad; i++)
        bad = host[i] != (int32_t)(nranks * (nranks - 1) / 2 + nranks * i);
    CHECK(!bad, "allreduce mismatch at %lu: %d", (unsigned long)(i - 1), host[i - 1]);

    /* ReduceScatter (max): block b of rank r holds r * b; rank r gets (p-1) * r. */
    for (i = 0; i < n * (uint64_t)nranks; i++) host[i] = (int32_t)(rank * (i / n));
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclReduceScatter(send, recv, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MAX, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, recv, n * sizeof(int32_t), ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n && !bad; i++) bad = host[i] != (nranks - 1) * rank;
    CHECK(!bad, "reduce_scatter mismatch at %lu: %d", (unsigned long)(i - 1), host[i - 1]);

    /* AlltoAll: block b sent by rank r is 1000 * r + b; rank r receives 1000 * b + r from b. */
    for (i = 0; i < n * (uint64_t)nranks; i++) host[i] = (int32_t)(1000 * rank + i / n);
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAlltoAll(send, n, HCCL_DATA_TYPE_INT32, recv, n, HCCL_DATA_TYPE_INT32, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n * (uint64_t)nranks && !bad; i++) bad = host[i] != (int32_t)(1000 * (i / n) + rank);
    CHECK(!bad, "alltoall mismatch at %lu: %d", (unsigned long)(i - 1), host[i - 1]);

    CHECK_ACL(aclrtFreeHost(host));
    CHECK_ACL(aclrtFree(recv));
    CHECK_ACL(aclrtFree(send));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclFinalize());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("OK: %d MPI ranks, allreduce/reduce_scatter/alltoall of %lu int32 checked\n", nranks, (unsigned long)n);
    MPI_Finalize();
    return 0;
}
