/*
 * hccl-rs CPU runtime shim: ACL profiling (acl_prof.h), implemented by
 * libhccl (also installed as libmsprofiler.so, the library Ascend ships
 * these calls in).
 *
 * The names, types and values are those of Ascend's acl_prof.h; the
 * subset declared here is the one the shim implements: aclprofInit ...
 * aclprofFinalize around aclprofStart / aclprofStop on a configuration made
 * with aclprofCreateConfig.
 *
 * On CPUs, profiling a device records the timeline of the platform
 * devices its streams and HCCL communicators run on: every stream task
 * (copies, reductions, link transfers, waits; begin and end) and one span
 * per HCCL op. aclprofStop writes it, per device, to
 * <profilerResultPath>/hccl_prof_dev<id>_<pid>.json as Chrome trace /
 * Perfetto JSON ("traceEvents"; open it in https://ui.perfetto.dev or
 * chrome://tracing). See docs/c-api.md for what is accepted, ignored or
 * refused, and the codes.
 */
#ifndef INC_EXTERNAL_ACL_PROF_H_
#define INC_EXTERNAL_ACL_PROF_H_

#if (defined(_WIN32) || defined(_WIN64) || defined(_MSC_VER))
#define MSVP_PROF_API __declspec(dllexport)
#else
#define MSVP_PROF_API __attribute__((visibility("default")))
#endif

#include <acl/acl_base.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dataTypeConfig bits (accepted and recorded; the timeline holds every
 * task and op span whichever are set) */
#define ACL_PROF_ACL_API                0x0001ULL
#define ACL_PROF_TASK_TIME              0x0002ULL
#define ACL_PROF_AICORE_METRICS         0x0004ULL
#define ACL_PROF_AICPU                  0x0008ULL
#define ACL_PROF_L2CACHE                0x0010ULL
#define ACL_PROF_HCCL_TRACE             0x0020ULL
#define ACL_PROF_TRAINING_TRACE         0x0040ULL
#define ACL_PROF_MSPROFTX               0x0080ULL
#define ACL_PROF_RUNTIME_API            0x0100ULL
#define ACL_PROF_GE_API_L0              0x0200ULL
#define ACL_PROF_TASK_TIME_L0           0x0800ULL
#define ACL_PROF_TASK_MEMORY            0x1000ULL
#define ACL_PROF_GE_API_L1              0x01000000ULL
#define ACL_PROF_TASK_TIME_L2           0x2000ULL
#define ACL_PROF_OP_ATTR                0x4000ULL
#define ACL_PROF_TASK_TIME_L3           0x8000ULL

typedef enum {
    ACL_AICORE_ARITHMETIC_UTILIZATION = 0,
    ACL_AICORE_PIPE_UTILIZATION = 1,
    ACL_AICORE_MEMORY_BANDWIDTH = 2,
    ACL_AICORE_L0B_AND_WIDTH = 3,
    ACL_AICORE_RESOURCE_CONFLICT_RATIO = 4,
    ACL_AICORE_MEMORY_UB = 5,
    ACL_AICORE_L2_CACHE = 6,
    ACL_AICORE_PIPE_EXECUTE_UTILIZATION = 7,
    ACL_AICORE_MEMORY_ACCESS = 8,
    ACL_AICORE_NONE = 0xFF
} aclprofAicoreMetrics;

typedef struct aclprofConfig aclprofConfig;
typedef struct aclprofAicoreEvents aclprofAicoreEvents;

/**
 * Initializes profiling: results go to the directory profilerResultPath
 * (length = strlen(profilerResultPath)), created if missing.
 */
MSVP_PROF_API aclError aclprofInit(const char *profilerResultPath, size_t length);

/** Ends profiling; devices still being profiled are stopped and written first. */
MSVP_PROF_API aclError aclprofFinalize(void);

/** Starts recording the timeline of each device of the configuration. */
MSVP_PROF_API aclError aclprofStart(const aclprofConfig *profilerConfig);

/**
 * A configuration: the devices to profile (deviceIdList[0..deviceNums)),
 * the AI Core metrics (accepted, nothing to measure on CPUs), aicoreEvents
 * (NULL only) and the data types (ACL_PROF_* bits). NULL on bad input.
 */
MSVP_PROF_API aclprofConfig *aclprofCreateConfig(uint32_t *deviceIdList, uint32_t deviceNums,
    aclprofAicoreMetrics aicoreMetrics, const aclprofAicoreEvents *aicoreEvents, uint64_t dataTypeConfig);

/** Releases a configuration (its devices keep being profiled until aclprofStop). */
MSVP_PROF_API aclError aclprofDestroyConfig(const aclprofConfig *profilerConfig);

/** Stops recording each device of the configuration and writes its timeline. */
MSVP_PROF_API aclError aclprofStop(const aclprofConfig *profilerConfig);

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_PROF_H_ */
