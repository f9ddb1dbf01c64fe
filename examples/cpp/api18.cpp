// HCCL's newer surface from C++11: a version-11 HcclCommConfig, AllGather of
// the FP8 types, symmetric windows, one-sided HcclBatchGet from registered
// memory, HcclCommSuspend / HcclCommResume, HcclConfigGetInfo, and ACL
// profiling (aclprofInit ... aclprofStop, timelines checked) around it all.
//
// Two ways to run, one source:
//   threads as ranks:   api18 threads NRANKS PROF_DIR
//   one rank a process: mpirun -np 4 api18_mpi mpi PROF_DIR   (built with -DAPI18_MPI)
//
// Built with -std=c++11 -Wall -Wextra -Werror against the installed tree and
// linked -lhccl -lhcomm -lacl_rt -lmsprofiler from PREFIX/lib64.
#include <hccl/hccl.h>
#include <hccl/hccl_comm.h>
#include <hccl/hccl_ex.h>
#include <hccl/hccl_sym_win.h>
#include <acl/acl.h>
#include <acl/acl_prof.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifdef API18_MPI
// the C API of MPI only (Open MPI's C++ bindings do not build with -Werror)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace {

std::atomic<int> g_failures(0);

#define CHECK_HCCL(call)                                                                   \
    do {                                                                                   \
        HcclResult r_ = (call);                                                            \
        if (r_ != HCCL_SUCCESS) {                                                          \
            std::fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call,       \
                         static_cast<int>(r_), HcclGetErrorString(r_));                   \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

#define CHECK_ACL(call)                                                                    \
    do {                                                                                   \
        aclError r_ = (call);                                                              \
        if (r_ != ACL_SUCCESS) {                                                           \
            std::fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_);       \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

void expect(bool ok, const char *what, uint32_t rank)
{
    if (!ok) {
        std::fprintf(stderr, "rank %u: check failed: %s\n", rank, what);
        ++g_failures;
    }
}

// The version-11 configuration every rank uses.
HcclCommConfig make_config(uint32_t rank)
{
    HcclCommConfig cfg;
    HcclCommConfigInit(&cfg);
    cfg.hcclBufferSize = 16;   // MB of CCL buffer (takes effect)
    cfg.hcclDeterministic = 2; // strict
    std::strcpy(cfg.hcclCommName, "api18");
    cfg.hcclWorldRankID = rank; // recorded
    cfg.hcclJobID = 0x1801;     // recorded
    cfg.hcclExecTimeOut = 120;  // s (takes effect)
    std::strcpy(cfg.hcclAlgo, "allgather=level0:ring/allreduce=level0:NA;level1:ring");
    std::strcpy(cfg.hcclBufferName, "api18-buffer"); // recorded
    cfg.hcclQos = 4;                          // recorded
    cfg.hcclSymWinMaxMemSizePerRank = 1;      // GB: bounds the windows
    cfg.hcclChannelSqDepth = 64;              // recorded
    return cfg;
}

uint8_t fp8_byte(uint32_t rank, size_t i, int type)
{
    return static_cast<uint8_t>((rank * 31u + i * 7u + static_cast<unsigned>(type)) & 0xffu);
}

void rank_main(uint32_t rank, uint32_t nranks, const HcclRootInfo *root)
{
    CHECK_ACL(aclrtSetDevice(static_cast<int32_t>(rank % 8)));
    aclrtStream stream = nullptr;
    CHECK_ACL(aclrtCreateStream(&stream));
    HcclCommConfig cfg = make_config(rank);
    HcclComm comm = nullptr;
    CHECK_HCCL(HcclCommInitRootInfoConfig(nranks, root, rank, &cfg, &comm));
    char name[COMM_NAME_MAX_LENGTH];
    CHECK_HCCL(HcclGetCommName(comm, name));
    expect(std::strcmp(name, "api18") == 0, "hcclCommName took effect", rank);
    HcclCommStatus status = HCCL_COMM_STATUS_INVALID;
    CHECK_HCCL(HcclCommGetStatus(name, &status));
    expect(status == HCCL_COMM_STATUS_READY, "status READY", rank);
    HcclOpExpansionMode mode = HCCL_OP_EXPANSION_MODE_INVALID;
    CHECK_HCCL(HcclConfigGetInfo(comm, HCCL_CONFIG_TYPE_OP_EXPANSION_MODE, sizeof mode, &mode));
    expect(mode == HCCL_OP_EXPANSION_MODE_HOST, "ops expand on the host", rank);

    // AllGather of every FP8 type: bytes moved, never reduced
    const size_t n = 4099;
    const HcclDataType fp8[] = {HCCL_DATA_TYPE_HIF8, HCCL_DATA_TYPE_FP8E4M3, HCCL_DATA_TYPE_FP8E5M2,
                                HCCL_DATA_TYPE_FP8E8M0};
    void *send = nullptr;
    void *recv = nullptr;
    CHECK_ACL(aclrtMalloc(&send, n, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc(&recv, n * nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    for (int t = 0; t < 4; ++t) {
        std::vector<uint8_t> mine(n);
        for (size_t i = 0; i < n; ++i) {
            mine[i] = fp8_byte(rank, i, t);
        }
        CHECK_ACL(aclrtMemcpy(send, n, mine.data(), n, ACL_MEMCPY_HOST_TO_DEVICE));
        CHECK_HCCL(HcclAllGather(send, recv, n, fp8[t], comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        std::vector<uint8_t> all(n * nranks);
        CHECK_ACL(aclrtMemcpy(all.data(), all.size(), recv, all.size(), ACL_MEMCPY_DEVICE_TO_HOST));
        bool ok = true;
        for (uint32_t q = 0; q < nranks; ++q) {
            for (size_t i = 0; i < n; ++i) {
                ok = ok && all[q * n + i] == fp8_byte(q, i, t);
            }
        }
        expect(ok, "FP8 AllGather", rank);
    }
    float one = 1.0f;
    void *fsum = nullptr;
    CHECK_ACL(aclrtMalloc(&fsum, sizeof one, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemcpy(fsum, sizeof one, &one, sizeof one, ACL_MEMCPY_HOST_TO_DEVICE));
    expect(HcclAllReduce(send, recv, n, HCCL_DATA_TYPE_FP8E4M3, HCCL_REDUCE_SUM, comm, stream) ==
               HCCL_E_NOT_SUPPORT,
           "FP8 refused by reductions", rank);

    // symmetric window: each rank stores into its right neighbour's window
    const uint32_t next = (rank + 1) % nranks;
    const uint32_t prev = (rank + nranks - 1) % nranks;
    void *window = nullptr;
    CHECK_ACL(aclrtMalloc(&window, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    HcclCommSymWindow win = nullptr;
    expect(HcclCommSymWinRegister(comm, window, (1ull << 30) + 4096, &win, 1) == HCCL_E_PARA,
           "a window above hcclSymWinMaxMemSizePerRank is refused", rank);
    CHECK_HCCL(HcclCommSymWinRegister(comm, window, 4096, &win, 1));
    void *peer = nullptr;
    CHECK_HCCL(HcclSymWinGetPeerPointer(win, sizeof(uint32_t) * rank, next, &peer));
    *static_cast<uint32_t *>(peer) = 1000u + rank;
    CHECK_HCCL(HcclBarrier(comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    uint32_t got = 0;
    CHECK_ACL(aclrtMemcpy(&got, sizeof got, static_cast<char *>(window) + sizeof(uint32_t) * prev,
                          sizeof got, ACL_MEMCPY_DEVICE_TO_HOST));
    expect(got == 1000u + prev, "the left neighbour's store landed in this window", rank);
    HcclCommSymWindow found = nullptr;
    size_t offset = 0;
    CHECK_HCCL(HcclCommSymWinGet(comm, static_cast<char *>(window) + 8, 8, &found, &offset));
    expect(found == win && offset == 8, "HcclCommSymWinGet", rank);
    CHECK_HCCL(HcclBarrier(comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_HCCL(HcclCommSymWinDeregister(win));

    // one-sided: registered memory exchanged with the neighbours; addresses
    // shared by an AllGather; each rank gets 16 floats from its right neighbour
    const size_t m = 1024;
    std::vector<float> values(m);
    for (size_t i = 0; i < m; ++i) {
        values[i] = static_cast<float>(rank * 10000u + i);
    }
    void *reg_buf = nullptr;
    CHECK_ACL(aclrtMalloc(&reg_buf, m * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemcpy(reg_buf, m * sizeof(float), values.data(), m * sizeof(float),
                          ACL_MEMCPY_HOST_TO_DEVICE));
    void *reg = nullptr;
    CHECK_HCCL(HcclCommRegister(comm, reg_buf, m * sizeof(float), &reg, 0));
    if (nranks > 1) {
        uint32_t peers[2] = {next, prev};
        CHECK_HCCL(HcclCommExchangeMem(comm, reg, peers, next == prev ? 1 : 2));
    }
    uint64_t my_addr = reinterpret_cast<uintptr_t>(reg_buf);
    void *addr_dev = nullptr;
    void *addrs_dev = nullptr;
    CHECK_ACL(aclrtMalloc(&addr_dev, sizeof my_addr, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc(&addrs_dev, sizeof my_addr * nranks, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemcpy(addr_dev, sizeof my_addr, &my_addr, sizeof my_addr, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_HCCL(HcclAllGather(addr_dev, addrs_dev, 1, HCCL_DATA_TYPE_UINT64, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    std::vector<uint64_t> addrs(nranks);
    CHECK_ACL(aclrtMemcpy(addrs.data(), sizeof my_addr * nranks, addrs_dev, sizeof my_addr * nranks,
                          ACL_MEMCPY_DEVICE_TO_HOST));
    if (nranks > 1) {
        void *local = nullptr;
        CHECK_ACL(aclrtMalloc(&local, 16 * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
        HcclOneSideOpDesc desc;
        desc.localAddr = local;
        desc.remoteAddr = reinterpret_cast<void *>(static_cast<uintptr_t>(addrs[next] + 100 * sizeof(float)));
        desc.count = 16;
        desc.dataType = HCCL_DATA_TYPE_FP32;
        CHECK_HCCL(HcclBatchGet(comm, next, &desc, 1, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        float buf[16];
        CHECK_ACL(aclrtMemcpy(buf, sizeof buf, local, sizeof buf, ACL_MEMCPY_DEVICE_TO_HOST));
        bool ok = true;
        for (size_t i = 0; i < 16; ++i) {
            ok = ok && buf[i] == static_cast<float>(next * 10000u + 100 + i);
        }
        expect(ok, "HcclBatchGet read the neighbour's registered memory", rank);
        CHECK_ACL(aclrtFree(local));
    }
    CHECK_HCCL(HcclBarrier(comm, stream)); // nobody deregisters while others read
    CHECK_ACL(aclrtSynchronizeStream(stream));
    CHECK_HCCL(HcclCommDeregister(comm, reg));

    // suspended: ops refused with HCCL_E_SUSPENDING; resumed: they run
    CHECK_HCCL(HcclCommSuspend(comm));
    CHECK_HCCL(HcclCommGetStatus(name, &status));
    expect(status == HCCL_COMM_STATUS_SUSPENDING, "status SUSPENDING", rank);
    expect(HcclAllReduce(fsum, fsum, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
               HCCL_E_SUSPENDING,
           "a suspended communicator refuses ops", rank);
    CHECK_HCCL(HcclCommResume(comm));
    CHECK_HCCL(HcclAllReduce(fsum, fsum, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    CHECK_ACL(aclrtSynchronizeStream(stream));
    float total = 0;
    CHECK_ACL(aclrtMemcpy(&total, sizeof total, fsum, sizeof total, ACL_MEMCPY_DEVICE_TO_HOST));
    expect(total == static_cast<float>(nranks), "AllReduce after resume", rank);

    CHECK_ACL(aclrtFree(send));
    CHECK_ACL(aclrtFree(recv));
    CHECK_ACL(aclrtFree(fsum));
    CHECK_ACL(aclrtFree(window));
    CHECK_ACL(aclrtFree(reg_buf));
    CHECK_ACL(aclrtFree(addr_dev));
    CHECK_ACL(aclrtFree(addrs_dev));
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
}

bool has_allgather_spans(const std::string &path)
{
    std::ifstream in(path.c_str());
    std::stringstream text;
    text << in.rdbuf();
    return text.str().find("AllGather") != std::string::npos;
}

} // namespace

int main(int argc, char **argv)
{
    const std::string how = argc > 1 ? argv[1] : "threads";
    uint32_t nranks = argc > 2 && how == "threads" ? static_cast<uint32_t>(std::atoi(argv[2])) : 4;
    const char *dir = argc > 3 ? argv[3] : (argc > 2 && how == "mpi" ? argv[2] : "./api18_prof");
    uint32_t rank = 0;
    HcclRootInfo root;
#ifdef API18_MPI
    if (how == "mpi") {
        MPI_Init(&argc, &argv);
        int r = 0;
        int s = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &s);
        rank = static_cast<uint32_t>(r);
        nranks = static_cast<uint32_t>(s);
    }
#endif
    if (nranks == 0 || nranks > 8) {
        std::fprintf(stderr, "1..8 ranks\n");
        return 2;
    }
    CHECK_ACL(aclInit(nullptr));
    uint32_t devices[8];
    const uint32_t ndev = how == "mpi" ? 1 : nranks;
    for (uint32_t d = 0; d < ndev; ++d) {
        devices[d] = how == "mpi" ? rank % 8 : d;
    }
    std::string pdir = std::string(dir) + (how == "mpi" ? "/rank" + std::to_string(rank) : "");
    if (how == "mpi") {
        std::string mk = "mkdir -p '" + pdir + "'";
        if (std::system(mk.c_str()) != 0) {
            return 1;
        }
    }
    CHECK_ACL(aclprofInit(pdir.c_str(), pdir.size()));
    aclprofConfig *prof = aclprofCreateConfig(devices, ndev, ACL_AICORE_NONE, nullptr,
                                              ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_HCCL_TRACE);
    if (prof == nullptr) {
        std::fprintf(stderr, "aclprofCreateConfig failed\n");
        return 1;
    }
    CHECK_ACL(aclprofStart(prof));
    if (HcclGetCommConfigCapability() <= HCCL_COMM_CONFIG_BUFFER_NAME) {
        std::fprintf(stderr, "the library does not take every version-11 config field\n");
        return 1;
    }

    if (how == "mpi") {
#ifdef API18_MPI
        CHECK_ACL(aclrtSetDevice(static_cast<int32_t>(rank % 8)));
        if (rank == 0) {
            CHECK_HCCL(HcclGetRootInfo(&root));
        }
        MPI_Bcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
        rank_main(rank, nranks, &root);
#else
        std::fprintf(stderr, "built without -DAPI18_MPI\n");
        return 2;
#endif
    } else {
        CHECK_ACL(aclrtSetDevice(0));
        CHECK_HCCL(HcclGetRootInfo(&root));
        std::vector<std::thread> threads;
        for (uint32_t r = 0; r < nranks; ++r) {
            threads.push_back(std::thread(rank_main, r, nranks, &root));
        }
        for (size_t i = 0; i < threads.size(); ++i) {
            threads[i].join();
        }
    }

    CHECK_ACL(aclprofStop(prof));
    for (uint32_t d = 0; d < ndev; ++d) {
        std::string path = pdir + "/hccl_prof_dev" + std::to_string(devices[d]) + "_" +
                           std::to_string(static_cast<long>(getpid())) + ".json";
        if (!has_allgather_spans(path)) {
            std::fprintf(stderr, "device %u: %s has no AllGather spans\n", devices[d], path.c_str());
            ++g_failures;
        }
    }
    CHECK_ACL(aclprofDestroyConfig(prof));
    CHECK_ACL(aclprofFinalize());
    CHECK_ACL(aclFinalize());
#ifdef API18_MPI
    if (how == "mpi") {
        int local = g_failures.load();
        int all = 0;
        MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        g_failures = all;
        MPI_Finalize();
    }
#endif
    if (g_failures.load() != 0) {
        std::printf("FAILED: %d check(s)\n", g_failures.load());
        return 1;
    }
    if (rank == 0) {
        std::printf("OK: %u ranks (%s): version-11 config, FP8 AllGather, symmetric windows, "
                    "HcclBatchGet, suspend/resume, profiles in %s\n",
                    nranks, how.c_str(), dir);
    }
    return 0;
}
