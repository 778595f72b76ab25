/*
 * nccl_abi.c — what runtime/rt_nccl.c passes to NCCL against an installed nccl.h: the values
 * (rt_internal.h's RT_NCCL_*, declared there because the runtime loads NCCL at run time and
 * includes no nccl.h) and every call of RT_NCCL_CALLS, its types spelled as nccl.h's, assigned
 * from NCCL's own prototype. Compiled, never run, by tests/runtime/run.sh when a nccl.h is
 * found (-Werror): a value or a signature that differs fails the compilation.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#define RT_NCCL_COMM ncclComm_t
#define RT_NCCL_ID ncclUniqueId
#define RT_NCCL_STREAM cudaStream_t
#define RT_NCCL_RESULT ncclResult_t
#define RT_NCCL_DTYPE ncclDataType_t
#define RT_NCCL_OP ncclRedOp_t
#define RT_NCCL_RESIDENCE ncclScalarResidence_t
#include "rt_internal.h"

_Static_assert(RT_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES && sizeof(ncclUniqueId) == sizeof(rt_nccl_id),
               "ncclUniqueId's size");
_Static_assert((int)RT_NCCL_SUCCESS == (int)ncclSuccess && (int)RT_NCCL_IN_PROGRESS == (int)ncclInProgress,
               "ncclResult_t");
_Static_assert((int)RT_NCCL_SUM == (int)ncclSum, "ncclRedOp_t");
_Static_assert((int)RT_NCCL_UINT64 == (int)ncclUint64 && (int)RT_NCCL_FLOAT == (int)ncclFloat32 &&
               (int)RT_NCCL_FLOAT64 == (int)ncclFloat64, "ncclDataType_t");
_Static_assert((int)RT_NCCL_SCALAR_HOST_IMMEDIATE == (int)ncclScalarHostImmediate, "ncclScalarResidence_t");
/* rt_nccl.c passes the enums as int and the handles as void * */
_Static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
               sizeof(ncclRedOp_t) == sizeof(int) && sizeof(ncclScalarResidence_t) == sizeof(int) &&
               sizeof(ncclComm_t) == sizeof(void *) && sizeof(cudaStream_t) == sizeof(void *),
               "the sizes of NCCL's types");

#define ABI_CHECK(name, ret, args) ret(*nccl_abi_##name) args = name;
RT_NCCL_CALLS(ABI_CHECK)
RT_NCCL_OPTIONAL(ABI_CHECK)
