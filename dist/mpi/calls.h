// Trampolines: cgo cannot call a C function pointer, so each entry Go uses has a
// small static function that calls through the table with its predefined handles.
// Each collective is one call; no pointer passed in is kept after it returns.
// Every call but MPI_Abort (which takes the whole job down) runs on t->comm.
#ifndef TURNSTILE_MPI_CALLS_H
#define TURNSTILE_MPI_CALLS_H

#include <time.h>

#include "table.h"

static inline int tsm_init_thread(const tsm_mpi *t, int required, int *provided) { return t->MPI_Init_thread(NULL, NULL, required, provided); }
static inline int tsm_initialized(const tsm_mpi *t, int *flag) { return t->MPI_Initialized(flag); }
static inline int tsm_finalized(const tsm_mpi *t, int *flag) { return t->MPI_Finalized(flag); }
static inline int tsm_finalize(const tsm_mpi *t) { return t->MPI_Finalize(); }
static inline int tsm_abort(const tsm_mpi *t, int code) { return t->MPI_Abort(t->comm_world, code); }
static inline int tsm_rank(const tsm_mpi *t, int *r) { return t->MPI_Comm_rank(t->comm, r); }
static inline int tsm_size(const tsm_mpi *t, int *n) { return t->MPI_Comm_size(t->comm, n); }
static inline int tsm_errors_return(const tsm_mpi *t) { return t->MPI_Comm_set_errhandler(t->comm, t->errors_return); }
static inline int tsm_error_string(const tsm_mpi *t, int code, char *s, int *n) { return t->MPI_Error_string(code, s, n); }
static inline int tsm_barrier(const tsm_mpi *t) { return t->MPI_Barrier(t->comm); }
static inline int tsm_bcast_bytes(const tsm_mpi *t, void *buf, int n, int root) { return t->MPI_Bcast(buf, n, t->dt_byte, root, t->comm); }
// tsm_allgather_int64_patient is MPI_Allgather for a gather that may wait
// long: a nonblocking allgather polled with MPI_Test, sleeping between polls
// (doubling from 10 µs to max_sleep_us), so a waiting rank sleeps instead of
// spinning a core. It returns when the gather completed or MPI_Test failed;
// local and all are not used after it returns. MPI_STATUS_IGNORE is NULL in
// Open MPI.
static inline int tsm_allgather_int64_patient(const tsm_mpi *t, const void *local, int n, void *all, long max_sleep_us) {
	tsm_handle req = NULL;
	int rc = t->MPI_Iallgather(local, n, t->dt_int64, all, n, t->dt_int64, t->comm, &req);
	if (rc != 0) return rc;
	long sleep_us = 10;
	for (;;) {
		int done = 0;
		rc = t->MPI_Test(&req, &done, NULL);
		if (rc != 0 || done) return rc;
		struct timespec ts = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
		nanosleep(&ts, NULL);
		if (sleep_us < max_sleep_us) sleep_us = sleep_us * 2 < max_sleep_us ? sleep_us * 2 : max_sleep_us;
	}
}
static inline int tsm_allgather_int64(const tsm_mpi *t, const void *local, int n, void *all) { return t->MPI_Allgather(local, n, t->dt_int64, all, n, t->dt_int64, t->comm); }
static inline int tsm_allgatherv_float(const tsm_mpi *t, const void *local, int n, void *all, const int *counts, const int *displs) { return t->MPI_Allgatherv(local, n, t->dt_float, all, counts, displs, t->dt_float, t->comm); }
static inline int tsm_gatherv_bytes(const tsm_mpi *t, const void *local, int n, void *all, const int *counts, const int *displs, int root) { return t->MPI_Gatherv(local, n, t->dt_byte, all, counts, displs, t->dt_byte, root, t->comm); }
static inline int tsm_reduce_scatter_v_sum_float(const tsm_mpi *t, const void *send, void *recv, const int *counts) { return t->MPI_Reduce_scatter(send, recv, counts, t->dt_float, t->op_sum, t->comm); }
static inline int tsm_comm_dup(const tsm_mpi *t, tsm_handle *out) { return t->MPI_Comm_dup(t->comm, out); }
static inline int tsm_comm_free(tsm_mpi *t) { return t->MPI_Comm_free(&t->comm); }
static inline int tsm_allreduce_sum_float(const tsm_mpi *t, void *buf, int n) { return t->MPI_Allreduce(TSM_IN_PLACE, buf, n, t->dt_float, t->op_sum, t->comm); }
static inline int tsm_reduce_scatter_sum_float(const tsm_mpi *t, const void *send, void *recv, int n) { return t->MPI_Reduce_scatter_block(send, recv, n, t->dt_float, t->op_sum, t->comm); }

#endif
