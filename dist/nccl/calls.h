// Trampolines: cgo cannot call a C function pointer, so each entry Go uses has a
// small static function that calls through the table. Device buffers and streams
// arrive as integers (CUdeviceptr, CUstream) and become pointers only here, so Go
// never holds a non-Go address as an unsafe.Pointer. Each collective is one call;
// no pointer passed in is kept after it returns.
#ifndef TURNSTILE_NCCL_CALLS_H
#define TURNSTILE_NCCL_CALLS_H

#include "table.h"

static inline int tsn_get_version(const tsn_nccl *t, int *v) { return t->ncclGetVersion(v); }
static inline const char *tsn_error_string(const tsn_nccl *t, int code) { return t->ncclGetErrorString(code); }
static inline int tsn_get_unique_id(const tsn_nccl *t, tsn_unique_id *id) { return t->ncclGetUniqueId(id); }
// The id is read through a pointer and passed on by value, as ncclCommInitRank takes it.
static inline int tsn_comm_init_rank(const tsn_nccl *t, tsn_comm *c, int nranks, const tsn_unique_id *id, int rank) { return t->ncclCommInitRank(c, nranks, *id, rank); }
static inline int tsn_comm_destroy(const tsn_nccl *t, tsn_comm c) { return t->ncclCommDestroy(c); }
static inline int tsn_comm_abort(const tsn_nccl *t, tsn_comm c) { return t->ncclCommAbort(c); }
static inline int tsn_comm_async_error(const tsn_nccl *t, tsn_comm c, int *e) { return t->ncclCommGetAsyncError(c, e); }
static inline int tsn_all_reduce_sum(const tsn_nccl *t, uintptr_t send, uintptr_t recv, size_t n, int dt, tsn_comm c, uintptr_t s) { return t->ncclAllReduce((const void *)send, (void *)recv, n, dt, TSN_SUM, c, (tsn_stream)s); }
static inline int tsn_all_gather(const tsn_nccl *t, uintptr_t send, uintptr_t recv, size_t n, int dt, tsn_comm c, uintptr_t s) { return t->ncclAllGather((const void *)send, (void *)recv, n, dt, c, (tsn_stream)s); }
static inline int tsn_reduce_scatter_sum(const tsn_nccl *t, uintptr_t send, uintptr_t recv, size_t n, int dt, tsn_comm c, uintptr_t s) { return t->ncclReduceScatter((const void *)send, (void *)recv, n, dt, TSN_SUM, c, (tsn_stream)s); }
static inline int tsn_broadcast(const tsn_nccl *t, uintptr_t send, uintptr_t recv, size_t n, int dt, int root, tsn_comm c, uintptr_t s) { return t->ncclBroadcast((const void *)send, (void *)recv, n, dt, root, c, (tsn_stream)s); }
static inline int tsn_group_start(const tsn_nccl *t) { return t->ncclGroupStart(); }
static inline int tsn_group_end(const tsn_nccl *t) { return t->ncclGroupEnd(); }

#endif
