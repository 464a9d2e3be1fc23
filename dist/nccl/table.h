// The libnccl function table, filled with dlopen/dlsym so that building turnstile
// needs no NCCL headers or libraries and a missing library or symbol is an error
// value, never a crash at load time.
//
// The prototypes are declared here from NCCL 2.x's documented C API, not taken
// from nccl.h: ncclComm_t and cudaStream_t are pointers; ncclResult_t,
// ncclDataType_t and ncclRedOp_t are C enums, passed as ints; ncclUniqueId is a
// 128-byte struct (NCCL_UNIQUE_ID_BYTES) passed by value to ncclCommInitRank.
#ifndef TURNSTILE_NCCL_TABLE_H
#define TURNSTILE_NCCL_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef void *tsn_comm;   // ncclComm_t
typedef void *tsn_stream; // cudaStream_t (the same object as the driver's CUstream)

// NCCL_UNIQUE_ID_BYTES.
enum { TSN_UNIQUE_ID_BYTES = 128 };

// ncclUniqueId: an opaque blob rank 0 makes and every rank passes, by value.
typedef struct {
	char internal[TSN_UNIQUE_ID_BYTES];
} tsn_unique_id;

// The ncclResult_t, ncclDataType_t and ncclRedOp_t values turnstile uses.
enum { TSN_SUCCESS = 0, TSN_IN_PROGRESS = 7 };
enum { TSN_SUM = 0 };

// tsn_nccl: the entries turnstile calls. Every int result is an ncclResult_t.
typedef struct {
	int (*ncclGetVersion)(int *);
	int (*ncclGetUniqueId)(tsn_unique_id *);
	int (*ncclCommInitRank)(tsn_comm *, int, tsn_unique_id, int);
	int (*ncclCommDestroy)(tsn_comm);
	int (*ncclCommAbort)(tsn_comm);
	int (*ncclCommGetAsyncError)(tsn_comm, int *);
	int (*ncclAllReduce)(const void *, void *, size_t, int, int, tsn_comm, tsn_stream);
	int (*ncclAllGather)(const void *, void *, size_t, int, tsn_comm, tsn_stream);
	int (*ncclReduceScatter)(const void *, void *, size_t, int, int, tsn_comm, tsn_stream);
	int (*ncclBroadcast)(const void *, void *, size_t, int, int, tsn_comm, tsn_stream);
	int (*ncclGroupStart)(void);
	int (*ncclGroupEnd)(void);
	const char *(*ncclGetErrorString)(int);
} tsn_nccl;


// tsn_load resolves every entry of t from handle. It returns 0 on success, or
// -1 with *missing set to the (static) name of the first symbol absent.
int tsn_load(void *handle, tsn_nccl *t, const char **missing);

#endif
