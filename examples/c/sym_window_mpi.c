/*
 * Memory peers address, one rank per process under mpirun: every rank
 * registers an aclrtMalloc buffer as its part of a symmetric window,
 * stores a value straight into the next rank's window through the peer
 * pointer, and after a barrier finds the previous rank's value in its
 * own; then it registers its AllReduce buffers with the communicator
 * (HcclCommRegister, hccl_ex.h), so the op reads the peers' buffers
 * through mappings instead of with system calls, and checks the result.
 *
 * Build: mpicc -Wall -Werror sym_window_mpi.c $(pkg-config --cflags --libs hccl)
 * Run:   mpirun -np 4 ./sym_window_mpi [count]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <hccl/hccl.h>
#include <hccl/hccl_ex.h>
#include <hccl/hccl_sym_win.h>

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
    uint64_t n = argc > 1 ? (uint64_t)atoll(argv[1]) : 100000, i;
    uint32_t ndev = 0, next, prev;
    HcclRootInfo root;
    HcclComm comm;
    HcclCommSymWindow win, found;
    aclrtStream stream;
    int32_t *window, *send, *recv, *host, got = 0;
    volatile int32_t *peer;
    void *peer_ptr = NULL, *hs = NULL, *hr = NULL;
    size_t offset = 1;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    size_t bytes;
    int bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    local = lr ? atoi(lr) : rank;
    next = (uint32_t)((rank + 1) % nranks);
    prev = (uint32_t)((rank + nranks - 1) % nranks);
    bytes = n * sizeof(int32_t);

    CHECK_ACL(aclInit(NULL));
    CHECK_ACL(aclrtGetDeviceCount(&ndev));
    CHECK_ACL(aclrtSetDevice(local % (int)ndev));
    CHECK_ACL(aclrtCreateStream(&stream));
    if (rank == 0) {
        CHECK_HCCL(HcclGetRootInfo(&root));
    }
    MPI_Bcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK_HCCL(HcclCommInitRootInfo((uint32_t)nranks, &root, (uint32_t)rank, &comm));

    /* A symmetric window of 4 KiB per rank; word r is written by rank r's predecessor. */
    CHECK_ACL(aclrtMalloc((void **)&window, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_HCCL(HcclCommSymWinRegister(comm, window, 4096, &win, 1));
    CHECK_HCCL(HcclSymWinGetPeerPointer(win, sizeof(int32_t) * (size_t)rank, next, &peer_ptr));
    peer = (volatile int32_t *)peer_ptr;
    *peer = 1000 * rank + 7; /* a plain store into the next rank's memory */
    CHECK_HCCL(HcclBarrier(comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(&got, sizeof(got), window + prev, sizeof(got), ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(got == (int32_t)(1000 * prev + 7), "window word %u is %d, rank %u stored %d", prev, got, prev,
          (int)(1000 * prev + 7));
    CHECK_HCCL(HcclCommSymWinGet(comm, window + 2, 8, &found, &offset));
    CHECK(found == win && offset == 8, "HcclCommSymWinGet: offset %zu", offset);
    CHECK_HCCL(HcclCommSymWinDeregister(win));

    /* AllReduce on registered buffers: rank r contributes r + i. */
    CHECK_ACL(aclrtMalloc((void **)&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void **)&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMallocHost((void **)&host, bytes));
    CHECK_HCCL(HcclCommRegister(comm, send, bytes, &hs, 0));
    CHECK_HCCL(HcclCommRegister(comm, recv, bytes, &hr, 0));
    for (i = 0; i < n; i++) host[i] = (int32_t)(rank + i);
    CHECK_ACL(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAllReduce(send, recv, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_ACL(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < n && !bad; i++)
        bad = host[i] != (int32_t)(nranks * (nranks - 1) / 2 + nranks * i);
    CHECK(!bad, "allreduce mismatch at %lu: %d", (unsigned long)(i - 1), host[i - 1]);
    CHECK_HCCL(HcclCommDeregister(comm, hs));
    CHECK_HCCL(HcclCommDeregister(comm, hr));

    CHECK_ACL(aclrtFree(window));
    CHECK_ACL(aclrtFree(send));
    CHECK_ACL(aclrtFree(recv));
    CHECK_ACL(aclrtFreeHost(host));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("OK: %d processes, symmetric window stores and a registered AllReduce of %lu int32 checked\n",
               nranks, (unsigned long)n);
    }
    MPI_Finalize();
    return 0;
}
