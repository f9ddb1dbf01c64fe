// C++: HcclCommInitAll creates every rank of one process; a std::thread per
// rank sets its device, runs AllReduce (max, in place) and Reduce (sum to a
// root) on its own stream, and checks the results.
//
// Build: g++ -std=c++17 -Wall -Werror allreduce.cpp $(pkg-config --cflags --libs hccl) -pthread
// Run:   ./allreduce [nranks] [count]
#include <hccl/hccl.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

void check(HcclResult r, const char *what)
{
    if (r != HCCL_SUCCESS) {
        throw std::runtime_error(std::string(what) + ": " + HcclGetErrorString(r));
    }
}

void check(aclError e, const char *what)
{
    if (e != ACL_SUCCESS) {
        throw std::runtime_error(std::string(what) + ": acl error " + std::to_string(e));
    }
}

// One rank's work; returns the number of wrong elements.
int run_rank(HcclComm comm, int32_t device, uint32_t nranks, uint64_t n)
{
    check(aclrtSetDevice(device), "aclrtSetDevice");
    uint32_t rank = 0;
    check(HcclGetRankId(comm, &rank), "HcclGetRankId");
    aclrtStream stream = nullptr;
    check(aclrtCreateStream(&stream), "aclrtCreateStream");
    void *buf = nullptr;
    void *out = nullptr;
    const size_t bytes = n * sizeof(double);
    check(aclrtMalloc(&buf, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    check(aclrtMalloc(&out, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");

    std::vector<double> host(n);
    for (uint64_t i = 0; i < n; i++) host[i] = double(rank) * 0.5 + double(i % 13);
    check(aclrtMemcpy(buf, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy");
    check(HcclAllReduce(buf, buf, n, HCCL_DATA_TYPE_FP64, HCCL_REDUCE_MAX, comm, stream), "HcclAllReduce");
    const uint32_t root = nranks / 2;
    check(HcclReduce(buf, out, n, HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM, root, comm, stream), "HcclReduce");
    check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");

    int wrong = 0;
    std::vector<double> got(n);
    check(aclrtMemcpy(got.data(), bytes, buf, bytes, ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy");
    for (uint64_t i = 0; i < n; i++) {
        wrong += got[i] != double(nranks - 1) * 0.5 + double(i % 13);
    }
    if (rank == root) {
        check(aclrtMemcpy(got.data(), bytes, out, bytes, ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy");
        for (uint64_t i = 0; i < n; i++) {
            wrong += got[i] != double(nranks) * (double(nranks - 1) * 0.5 + double(i % 13));
        }
    }
    check(aclrtFree(out), "aclrtFree");
    check(aclrtFree(buf), "aclrtFree");
    check(aclrtDestroyStream(stream), "aclrtDestroyStream");
    return wrong;
}

}  // namespace

int main(int argc, char **argv)
{
    const uint32_t nranks = argc > 1 ? uint32_t(std::atoi(argv[1])) : 4;
    const uint64_t n = argc > 2 ? uint64_t(std::atoll(argv[2])) : 10000;
    try {
        check(aclInit(nullptr), "aclInit");
        std::vector<int32_t> devices(nranks);
        for (uint32_t i = 0; i < nranks; i++) devices[i] = int32_t(i);
        std::vector<HcclComm> comms(nranks);
        check(HcclCommInitAll(nranks, devices.data(), comms.data()), "HcclCommInitAll");

        std::atomic<int> wrong{0};
        std::atomic<int> errors{0};
        std::vector<std::thread> threads;
        for (uint32_t r = 0; r < nranks; r++) {
            threads.emplace_back([&, r] {
                try {
                    wrong += run_rank(comms[r], devices[r], nranks, n);
                } catch (const std::exception &e) {
                    std::fprintf(stderr, "rank %u: %s\n", r, e.what());
                    errors++;
                }
            });
        }
        for (auto &t : threads) t.join();
        for (auto c : comms) check(HcclCommDestroy(c), "HcclCommDestroy");
        check(aclFinalize(), "aclFinalize");
        if (wrong || errors) {
            std::printf("FAILED: %d wrong elements, %d errors\n", wrong.load(), errors.load());
            return 1;
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    std::printf("OK: %u ranks (HcclCommInitAll), allreduce max in place + reduce sum of %lu doubles checked\n",
                nranks, static_cast<unsigned long>(n));
    return 0;
}
