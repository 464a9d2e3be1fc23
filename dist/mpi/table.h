// The libmpi function table, filled with dlopen/dlsym so that building turnstile
// needs no MPI headers or libraries and a missing library or symbol is an error
// value, never a crash at load time.
//
// The types mirror Open MPI's ABI (libmpi.so.40): MPI_Comm, MPI_Datatype, MPI_Op
// and MPI_Errhandler are pointers to library structs, and each predefined handle
// (MPI_COMM_WORLD, MPI_BYTE, ...) is the address of an exported object such as
// ompi_mpi_comm_world. Counts, ranks and error codes are C ints.
#ifndef TURNSTILE_MPI_TABLE_H
#define TURNSTILE_MPI_TABLE_H

#include <stddef.h>

typedef void *tsm_handle; // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler

// Open MPI's MPI_IN_PLACE sentinel buffer address.
#define TSM_IN_PLACE ((void *)1)

// Open MPI's MPI_THREAD_* levels and MPI_MAX_ERROR_STRING.
enum { TSM_THREAD_SINGLE = 0, TSM_THREAD_FUNNELED = 1, TSM_THREAD_SERIALIZED = 2, TSM_THREAD_MULTIPLE = 3 };
enum { TSM_MAX_ERROR_STRING = 256 };

// tsm_mpi: the entries turnstile calls and the predefined handles it passes.
typedef struct {
	int (*MPI_Init_thread)(int *, char ***, int, int *);
	int (*MPI_Initialized)(int *);
	int (*MPI_Finalized)(int *);
	int (*MPI_Finalize)(void);
	int (*MPI_Abort)(tsm_handle, int);
	int (*MPI_Comm_rank)(tsm_handle, int *);
	int (*MPI_Comm_size)(tsm_handle, int *);
	int (*MPI_Comm_set_errhandler)(tsm_handle, tsm_handle);
	int (*MPI_Comm_dup)(tsm_handle, tsm_handle *);
	int (*MPI_Comm_free)(tsm_handle *);
	int (*MPI_Error_string)(int, char *, int *);
	int (*MPI_Barrier)(tsm_handle);
	int (*MPI_Bcast)(void *, int, tsm_handle, int, tsm_handle);
	int (*MPI_Allgather)(const void *, int, tsm_handle, void *, int, tsm_handle, tsm_handle);
	int (*MPI_Allgatherv)(const void *, int, tsm_handle, void *, const int *, const int *,
			      tsm_handle, tsm_handle);
	int (*MPI_Gatherv)(const void *, int, tsm_handle, void *, const int *, const int *, tsm_handle,
			   int, tsm_handle);
	int (*MPI_Allreduce)(const void *, void *, int, tsm_handle, tsm_handle, tsm_handle);
	int (*MPI_Reduce_scatter_block)(const void *, void *, int, tsm_handle, tsm_handle,
					tsm_handle);
	int (*MPI_Reduce_scatter)(const void *, void *, const int *, tsm_handle, tsm_handle,
				  tsm_handle);
	int (*MPI_Iallgather)(const void *, int, tsm_handle, void *, int, tsm_handle, tsm_handle,
			      tsm_handle *);
	int (*MPI_Test)(tsm_handle *, int *, void *);

	// Predefined handles: the addresses of the exported objects, not their values.
	tsm_handle comm_world;     // MPI_COMM_WORLD: ompi_mpi_comm_world
	tsm_handle dt_byte;        // MPI_BYTE: ompi_mpi_byte
	tsm_handle dt_float;       // MPI_FLOAT: ompi_mpi_float
	tsm_handle dt_int64;       // MPI_INT64_T: ompi_mpi_int64_t
	tsm_handle op_sum;         // MPI_SUM: ompi_mpi_op_sum
	tsm_handle errors_return;  // MPI_ERRORS_RETURN: ompi_mpi_errors_return

	// The communicator every call but MPI_Abort runs on: comm_world after
	// tsm_load's caller sets it, or a duplicate of it (MPI_Comm_dup). Not
	// resolved by tsm_load.
	tsm_handle comm;
} tsm_mpi;


// tsm_load resolves every entry and handle of t from handle. It returns 0 on
// success, or -1 with *missing set to the (static) name of the first symbol absent.
int tsm_load(void *handle, tsm_mpi *t, const char **missing);

#endif
