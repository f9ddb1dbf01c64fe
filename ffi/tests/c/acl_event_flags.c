/*
 * Built and run by ffi/tests/c_event_flags.rs (against include/ and the
 * libhccl.so of this build): a C program testing what a program written
 * for Ascend tests. Ascend's constants compile with Ascend's values
 * (checked against literals transcribed from hicann/runtime's acl_rt.h,
 * acl_base_rt.h and rt_error_codes.h) and work as case labels;
 * aclrtCreateEventWithFlag accepts each flag and the combinations
 * Ascend's runtime accepts, refuses the others with
 * ACL_ERROR_RT_PARAM_INVALID, and the events behave per flag: elapsed
 * time only between ACL_EVENT_TIME_LINE events, stream waits and resets
 * only of ACL_EVENT_SYNC (or ACL_EVENT_EXTERNAL) events, no host use of an
 * ACL_EVENT_DEVICE_USE_ONLY event. Prints "ok" and exits 0, or names the
 * first failed check and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <acl/acl.h>

/* a few of each family, against Ascend's values */
_Static_assert(ACL_ERROR_INVALID_MODEL_ID == 100011, "general 1xxxxx");
_Static_assert(ACL_ERROR_INVALID_BUNDLE_MODEL_ID == 148053, "general 148xxx");
_Static_assert(ACL_ERROR_PROF_MODULES_UNSUPPORTED == 200007, "general 2xxxxx");
_Static_assert(ACL_ERROR_STORAGE_OVER_LIMIT == 300000, "general 3xxxxx");
_Static_assert(ACL_ERROR_PROFILING_FAILURE == 500005, "general 5xxxxx");
_Static_assert(ACL_RT_SUCCESS == 0, "rt success");
_Static_assert(ACL_ERROR_RT_PARAM_INVALID == 107000, "rt 107xxx");
_Static_assert(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID == 107006, "rt 107xxx");
_Static_assert(ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING == 107045, "rt 107xxx");
_Static_assert(ACL_ERROR_STREAM_CAPTURE_CONFLICT == 107032, "rt 107xxx");
_Static_assert(ACL_ERROR_RT_FEATURE_NOT_SUPPORT == 207000, "rt 207xxx");
_Static_assert(ACL_ERROR_RT_MEMORY_ALLOCATION == 207001, "rt 207xxx");
_Static_assert(ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED == 207021, "rt 207xxx");
_Static_assert(ACL_ERROR_RT_INTERNAL_ERROR == 507000, "rt 507xxx");
_Static_assert(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT == 507047, "rt 507xxx");
_Static_assert(ACL_ERROR_RT_COMM_OP_RETRY_FAIL == 507904, "rt 5079xx");
_Static_assert(ACL_ERROR_RT_CCU_EXCEPTION == 507916, "rt 5079xx");
_Static_assert(ACL_EVENT_SYNC == 0x1u && ACL_EVENT_CAPTURE_STREAM_PROGRESS == 0x2u &&
                   ACL_EVENT_TIME_LINE == 0x8u && ACL_EVENT_DEVICE_USE_ONLY == 0x10u &&
                   ACL_EVENT_EXTERNAL == 0x20u && ACL_EVENT_IPC == 0x40u,
               "event flags");
_Static_assert(ACL_STREAM_FAST_LAUNCH == 0x1u && ACL_STREAM_FAST_SYNC == 0x2u &&
                   ACL_STREAM_PERSISTENT == 0x4u && ACL_STREAM_HUGE == 0x8u &&
                   ACL_STREAM_CPU_SCHEDULE == 0x10u && ACL_STREAM_DEVICE_USE_ONLY == 0x20u,
               "stream flags");
_Static_assert(ACL_MEMCPY_DEFAULT == 4 && ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE == 5 &&
                   ACL_MEMCPY_INTER_DEVICE_TO_DEVICE == 7,
               "aclrtMemcpyKind");
_Static_assert(ACL_MEM_MALLOC_HUGE1G_ONLY_P2P == 7 && ACL_MEM_TYPE_HIGH_BAND_WIDTH == 0x1000 &&
                   ACL_MEM_ACCESS_USER_SPACE_READONLY == 0x100000,
               "aclrtMemMallocPolicy");
_Static_assert(ACL_MEM_NORMAL == 12 && ACL_MEM_P2P_HUGE1G == 17, "aclrtMemAttr");
_Static_assert(ACL_EVENT_STATUS_NOT_READY == 1 && ACL_EVENT_WAIT_STATUS_RESERVED == 0xffff &&
                   ACL_STREAM_STATUS_NOT_READY == 1 && ACL_EVENT_RECORDED_STATUS_COMPLETE == 1,
               "status enums");
_Static_assert(ACL_MEM_LOCATION_TYPE_HOST_NUMA == 4 && ACL_MEM_HANDLE_TYPE_POSIX == 2,
               "memory property enums");

static int failures;

#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                   \
            fprintf(stderr, "\n");                          \
            failures++;                                     \
        }                                                   \
    } while (0)

#define EXPECT(call, want)                                                            \
    do {                                                                              \
        aclError got_ = (call);                                                       \
        CHECK(got_ == (want), "%s returned %d (%s), expected %s (%d)", #call, got_, \
              describe(got_), #want, (int)(want));                                    \
    } while (0)

/* The codes as a program's error reporting names them: case labels. */
static const char *describe(aclError e)
{
    switch (e) {
    case ACL_SUCCESS:
        return "success";
    case ACL_ERROR_INVALID_PARAM:
        return "invalid parameter";
    case ACL_ERROR_INVALID_RESOURCE_HANDLE:
        return "invalid handle";
    case ACL_ERROR_RT_PARAM_INVALID:
        return "runtime: invalid parameter";
    case ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID:
        return "runtime: no event timestamp";
    case ACL_ERROR_RT_FEATURE_NOT_SUPPORT:
        return "runtime: not supported";
    case ACL_ERROR_RT_MEMORY_ALLOCATION:
        return "runtime: out of memory";
    case ACL_ERROR_RT_INTERNAL_ERROR:
        return "runtime: internal error";
    default:
        return "other";
    }
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* What a flag gives (Ascend's runtime's rules). */
struct Kind {
    uint32_t flag;
    const char *name;
    int timed;    /* aclrtEventElapsedTime works */
    int waitable; /* aclrtStreamWaitEvent / aclrtResetEvent work */
    int host;     /* may be recorded from the host */
    int external; /* synchronize / query refused */
};

static const struct Kind kinds[] = {
    {ACL_EVENT_SYNC, "SYNC", 0, 1, 1, 0},
    {ACL_EVENT_CAPTURE_STREAM_PROGRESS, "CAPTURE_STREAM_PROGRESS", 0, 0, 1, 0},
    {ACL_EVENT_TIME_LINE, "TIME_LINE", 1, 0, 1, 0},
    {ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE, "SYNC|TIME_LINE", 1, 1, 1, 0},
    {ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE, "SYNC|PROGRESS|TIME_LINE",
     1, 1, 1, 0},
    {ACL_EVENT_DEVICE_USE_ONLY, "DEVICE_USE_ONLY", 0, 0, 0, 0},
    {ACL_EVENT_EXTERNAL, "EXTERNAL", 0, 1, 1, 1},
};

static void one_kind(const struct Kind *k, aclrtStream s, aclrtStream other)
{
    aclrtEvent e = NULL, ref = NULL;
    aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    float ms = -1.0f;
    aclError r = aclrtCreateEventWithFlag(&e, k->flag);
    CHECK(r == ACL_SUCCESS && e != NULL, "%s: create returned %d", k->name, r);
    if (r != ACL_SUCCESS) {
        return;
    }
    if (aclrtCreateEventWithFlag(&ref, ACL_EVENT_TIME_LINE) != ACL_SUCCESS) {
        CHECK(0, "reference event");
        return;
    }
    EXPECT(aclrtRecordEvent(ref, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);
    sleep_ms(20);
    r = aclrtRecordEvent(e, s);
    if (!k->host) {
        CHECK(r == ACL_ERROR_RT_PARAM_INVALID, "%s: host record returned %d", k->name, r);
        CHECK(aclrtStreamWaitEvent(other, e) == ACL_ERROR_RT_PARAM_INVALID, "%s: stream wait", k->name);
        CHECK(aclrtResetEvent(e, s) == ACL_ERROR_RT_PARAM_INVALID, "%s: reset", k->name);
    } else {
        CHECK(r == ACL_SUCCESS, "%s: record returned %d", k->name, r);
    }
    EXPECT(aclrtSynchronizeStream(s), ACL_SUCCESS);

    r = aclrtSynchronizeEvent(e);
    CHECK(r == (k->external ? ACL_ERROR_RT_FEATURE_NOT_SUPPORT : ACL_SUCCESS), "%s: synchronize returned %d",
          k->name, r);
    r = aclrtQueryEventStatus(e, &st);
    CHECK(r == (k->external ? ACL_ERROR_RT_FEATURE_NOT_SUPPORT : ACL_SUCCESS), "%s: query returned %d", k->name,
          r);
    CHECK(k->external || st == ACL_EVENT_RECORDED_STATUS_COMPLETE, "%s: status %d", k->name, (int)st);

    /* elapsed time from the timed reference to this event, and back */
    r = aclrtEventElapsedTime(&ms, ref, e);
    if (k->timed) {
        CHECK(r == ACL_SUCCESS && ms >= 19.0f && ms < 5000.0f, "%s: elapsed returned %d, %f ms", k->name, r,
              (double)ms);
        r = aclrtEventElapsedTime(&ms, e, ref);
        CHECK(r == ACL_SUCCESS && ms <= -19.0f, "%s: reversed elapsed returned %d, %f ms", k->name, r, (double)ms);
    } else if (k->external) {
        CHECK(r == ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: elapsed returned %d", k->name, r);
    } else if (k->host) {
        CHECK(r == ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "%s: elapsed returned %d", k->name, r);
        r = aclrtEventElapsedTime(&ms, e, ref);
        CHECK(r == ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "%s: reversed elapsed returned %d", k->name, r);
    }

    if (k->host) {
        r = aclrtStreamWaitEvent(other, e);
        CHECK(r == (k->waitable ? ACL_SUCCESS : ACL_ERROR_RT_FEATURE_NOT_SUPPORT), "%s: stream wait returned %d",
              k->name, r);
        r = aclrtResetEvent(e, s);
        CHECK(r == (k->waitable ? ACL_SUCCESS : ACL_ERROR_RT_FEATURE_NOT_SUPPORT), "%s: reset returned %d",
              k->name, r);
    }
    EXPECT(aclrtSynchronizeStream(other), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(e), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(ref), ACL_SUCCESS);
}

int main(void)
{
    aclrtStream s = NULL, other = NULL;
    aclrtEvent e = NULL, d1 = NULL, d2 = NULL;
    size_t i;
    float ms = 0.0f;
    void *a = NULL, *b = NULL;
    size_t free_b = 0, total_b = 0;
    static const uint32_t refused[] = {
        0,
        ACL_EVENT_IPC,
        0x80u,
        0x100u,
        0x80000000u,
        0xffffffffu,
        ACL_EVENT_EXTERNAL | ACL_EVENT_SYNC,
        ACL_EVENT_EXTERNAL | ACL_EVENT_TIME_LINE,
        ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_TIME_LINE,
        ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_EXTERNAL,
        ACL_EVENT_IPC | ACL_EVENT_SYNC,
        ACL_EVENT_TIME_LINE | 0x80u,
    };

    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&s), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&other), ACL_SUCCESS);

    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        one_kind(&kinds[i], s, other);
    }

    /* unknown bits and combinations Ascend refuses: the code, no event */
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        e = NULL;
        aclError r = aclrtCreateEventWithFlag(&e, refused[i]);
        CHECK(r == ACL_ERROR_RT_PARAM_INVALID && e == NULL, "flag %#x: returned %d (%s), event %p",
              (unsigned)refused[i], r, describe(r), e);
    }
    EXPECT(aclrtCreateEventWithFlag(NULL, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);

    /* aclrtCreateEvent: Ascend's default event, timed and waitable */
    EXPECT(aclrtCreateEvent(&d1), ACL_SUCCESS);
    EXPECT(aclrtCreateEvent(&d2), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(d1, s), ACL_SUCCESS);
    EXPECT(aclrtRecordEvent(d2, s), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeEvent(d2), ACL_SUCCESS);
    EXPECT(aclrtEventElapsedTime(&ms, d1, d2), ACL_SUCCESS);
    CHECK(ms >= 0.0f, "default events: %f ms", (double)ms);
    EXPECT(aclrtStreamWaitEvent(other, d2), ACL_SUCCESS);
    EXPECT(aclrtResetEvent(d1, s), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(d1), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(d2), ACL_SUCCESS);

    /* the newer memcpy kinds, malloc policies and memory attributes */
    EXPECT(aclrtMalloc(&a, 64, ACL_MEM_MALLOC_HUGE1G_ONLY), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&b, 64, ACL_MEM_MALLOC_HUGE1G_ONLY_P2P | ACL_MEM_TYPE_HIGH_BAND_WIDTH), ACL_SUCCESS);
    EXPECT(aclrtMemset(a, 64, 0x5a, 64), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(b, 64, a, 64, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE), ACL_SUCCESS);
    CHECK(((unsigned char *)b)[63] == 0x5a, "inter-device copy");
    EXPECT(aclrtMemcpy(b, 64, a, 64, (aclrtMemcpyKind)(ACL_MEMCPY_INTER_DEVICE_TO_DEVICE + 1)),
           ACL_ERROR_INVALID_PARAM);
    EXPECT(aclrtGetMemInfo(ACL_MEM_P2P_HUGE1G, &free_b, &total_b), ACL_SUCCESS);
    CHECK(free_b > 0 && free_b <= total_b, "meminfo %zu of %zu", free_b, total_b);
    EXPECT(aclrtFree(a), ACL_SUCCESS);
    EXPECT(aclrtFree(b), ACL_SUCCESS);

    EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(s), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
