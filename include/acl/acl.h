/*
 * hccl-rs CPU runtime shim (acl.h): the part of Ascend's ACL that HCCL
 * programs call around the HCCL calls, running on CPUs.
 */
#ifndef INC_EXTERNAL_ACL_ACL_H_
#define INC_EXTERNAL_ACL_ACL_H_

#include <acl/acl_base.h>
#include <acl/acl_rt.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Initializes the runtime (`configPath` may be NULL; a JSON file is accepted and not read). */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);

/** Finalizes the runtime. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif
#endif /* INC_EXTERNAL_ACL_ACL_H_ */
