/*
 * rt_mpi.c — MPI between processes for `mpirun -np N PROG train` (data-parallel training across
 * processes and machines), loaded at run time.
 *
 * Nothing links against MPI: when the process was started by Open MPI's launcher
 * (OMPI_COMM_WORLD_SIZE is set), the runtime dlopens Open MPI's libmpi.so.40 (Debian's
 * openmpi-bin) and looks up the few functions it calls and the predefined handles, which Open MPI
 * exports as objects (MPI_COMM_WORLD is &ompi_mpi_comm_world, MPI_FLOAT &ompi_mpi_float, ...), as
 * the runtime loads cuBLAS. A program started without mpirun never touches MPI; one started by
 * mpirun on a machine without the library fails saying what to install.
 */
#include "modelrt.h"
#include "rt_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
    int active, rank, size;
    void *lib;
    int (*init)(int *, char ***);
    int (*finalize)(void);
    int (*comm_rank)(void *, int *);
    int (*comm_size)(void *, int *);
    int (*allreduce)(const void *, void *, int, void *, void *, void *);
    int (*allgather)(const void *, int, void *, void *, int, void *, void *);
    int (*abort_)(void *, int);
    int (*bcast)(void *, int, void *, int, void *);
    int (*iallreduce)(const void *, void *, int, void *, void *, void *, void **);
    int (*testall)(int, void **, int *, void *);
    void **req; /* the posted rt_mpi_iallreduce_f32 requests (Open MPI's MPI_Request is a pointer) */
    double timeout; /* seconds a collective may wait for the other ranks: $MODELRT_MPI_TIMEOUT, else 600 */
    int broken;     /* a wait timed out: the ranks no longer agree where they are (rt_mpi_broken) */
    int nreq, capreq;
    void *world, *t_float, *t_double, *t_u64, *t_byte, *op_sum;
} mpi;

#define MPI_IN_PLACE_ ((void *)1) /* Open MPI's MPI_IN_PLACE */

mrt_status rt_mpi_start(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    if (mpi.active) {
        *rank = mpi.rank;
        *size = mpi.size;
        return MRT_OK;
    }
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (!ws || !*ws)
        return MRT_OK; /* not started by mpirun: one process */
    mpi.lib = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
    if (!mpi.lib)
        return mrt_set_error(MRT_ERR_DEVICE, "started by mpirun (OMPI_COMM_WORLD_SIZE=%s), but Open MPI's library cannot "
                             "be loaded: %s (Debian: apt-get install openmpi-bin)", ws, dlerror());
    struct {
        const char *name;
        void **at;
    } syms[] = {{"MPI_Init", (void **)&mpi.init},
                {"MPI_Finalize", (void **)&mpi.finalize},
                {"MPI_Comm_rank", (void **)&mpi.comm_rank},
                {"MPI_Comm_size", (void **)&mpi.comm_size},
                {"MPI_Allreduce", (void **)&mpi.allreduce},
                {"MPI_Allgather", (void **)&mpi.allgather},
                {"MPI_Abort", (void **)&mpi.abort_},
                {"MPI_Bcast", (void **)&mpi.bcast},
                {"MPI_Iallreduce", (void **)&mpi.iallreduce},
                {"MPI_Testall", (void **)&mpi.testall},
                {"ompi_mpi_byte", &mpi.t_byte},
                {"ompi_mpi_comm_world", &mpi.world},
                {"ompi_mpi_float", &mpi.t_float},
                {"ompi_mpi_double", &mpi.t_double},
                {"ompi_mpi_unsigned_long_long", &mpi.t_u64},
                {"ompi_mpi_op_sum", &mpi.op_sum}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].at = dlsym(mpi.lib, syms[i].name)))
            return mrt_set_error(MRT_ERR_DEVICE, "libmpi.so.40 has no '%s': not Open MPI 4 or 5", syms[i].name);
    mrt_status st = rt_env_seconds("MODELRT_MPI_TIMEOUT", 600, &mpi.timeout);
    if (st != MRT_OK)
        return st;
    if (mpi.init(NULL, NULL) != 0 || mpi.comm_rank(mpi.world, &mpi.rank) != 0 || mpi.comm_size(mpi.world, &mpi.size) != 0)
        return mrt_set_error(MRT_ERR_DEVICE, "MPI_Init failed (OMPI_COMM_WORLD_SIZE=%s)", ws);
    mpi.active = 1;
    *rank = mpi.rank;
    *size = mpi.size;
    return MRT_OK;
}

mrt_status rt_mpi_allreduce_f32(float *x, int64_t n)
{
    for (int64_t at = 0; at < n; at += INT_MAX / 2) {
        int c = (int)(n - at < INT_MAX / 2 ? n - at : INT_MAX / 2);
        if (mpi.allreduce(MPI_IN_PLACE_, x + at, c, mpi.t_float, mpi.op_sum, mpi.world) != 0)
            return mrt_set_error(MRT_ERR_DEVICE, "MPI_Allreduce of %d floats failed (rank %d of %d)", c, mpi.rank, mpi.size);
    }
    return MRT_OK;
}

mrt_status rt_mpi_iallreduce_f32(float *x, int64_t n)
{
    for (int64_t at = 0; at < n; at += INT_MAX / 2) {
        int c = (int)(n - at < INT_MAX / 2 ? n - at : INT_MAX / 2);
        if (mpi.nreq == mpi.capreq) {
            int cap = mpi.capreq ? 2 * mpi.capreq : 64;
            void **r = realloc(mpi.req, sizeof *r * (size_t)cap);
            if (!r)
                return mrt_set_error(MRT_ERR_OOM, "out of memory");
            mpi.req = r;
            mpi.capreq = cap;
        }
        if (mpi.iallreduce(MPI_IN_PLACE_, x + at, c, mpi.t_float, mpi.op_sum, mpi.world, &mpi.req[mpi.nreq]) != 0)
            return mrt_set_error(MRT_ERR_DEVICE, "MPI_Iallreduce of %d floats failed (rank %d of %d)", c, mpi.rank, mpi.size);
        mpi.nreq++;
    }
    return MRT_OK;
}

mrt_status rt_mpi_test(void)
{
    int flag = 0;
    if (mpi.nreq && mpi.testall(mpi.nreq, mpi.req, &flag, NULL) != 0)
        return mrt_set_error(MRT_ERR_DEVICE, "MPI_Testall of %d all-reduces failed (rank %d of %d)", mpi.nreq, mpi.rank,
                             mpi.size);
    return MRT_OK;
}

static double mpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait for n requests, polling (MPI_Testall, then a sleep that grows from 20 us to 1 ms, so a
 * wait does not spin a core as MPI_Waitall does) for at most mpi.timeout seconds: a rank that is
 * stopped or stuck (alive, so mpirun does not end the job) is an error naming the wait, and the
 * caller's error path aborts every rank (rt_mpi_abort), as NCCL's timeout does. */
static mrt_status mpi_wait(int n, void **req, const char *what)
{
    double t0 = mpi_now();
    for (long spins = 0;; spins++) {
        int flag = 0;
        if (mpi.testall(n, req, &flag, NULL) != 0)
            return mrt_set_error(MRT_ERR_DEVICE, "%s failed (rank %d of %d)", what, mpi.rank, mpi.size);
        if (flag)
            return MRT_OK;
        if (mpi_now() - t0 > mpi.timeout) {
            mpi.broken = 1;
            return mrt_set_error(MRT_ERR_DEVICE, "%s did not finish within %g s (MODELRT_MPI_TIMEOUT; rank %d of %d): "
                                 "another rank is gone or stuck", what, mpi.timeout, mpi.rank, mpi.size);
        }
        struct timespec ts = {0, spins < 1000 ? 20000 : 1000000};
        nanosleep(&ts, NULL);
    }
}

mrt_status rt_mpi_wait_all(void)
{
    int n = mpi.nreq;
    mpi.nreq = 0;
    if (!n)
        return MRT_OK;
    char what[96];
    snprintf(what, sizeof what, "MPI_Iallreduce of %d gradient pieces", n);
    return mpi_wait(n, mpi.req, what);
}

mrt_status rt_mpi_allreduce_f64(double *x, int n)
{
    void *req = NULL;
    if (mpi.iallreduce(MPI_IN_PLACE_, x, n, mpi.t_double, mpi.op_sum, mpi.world, &req) != 0)
        return mrt_set_error(MRT_ERR_DEVICE, "MPI_Iallreduce of %d doubles failed (rank %d of %d)", n, mpi.rank, mpi.size);
    char what[96];
    snprintf(what, sizeof what, "MPI_Iallreduce of %d doubles (the step's loss and norm)", n);
    return mpi_wait(1, &req, what);
}

mrt_status rt_mpi_allgather_u64(const uint64_t *mine, uint64_t *all, int n)
{
    if (mpi.allgather(mine, n, mpi.t_u64, all, n, mpi.t_u64, mpi.world) != 0)
        return mrt_set_error(MRT_ERR_DEVICE, "MPI_Allgather failed (rank %d of %d)", mpi.rank, mpi.size);
    return MRT_OK;
}

/* The NCCL unique id from rank 0 to every rank (as llm.c sends it). */
mrt_status rt_mpi_bcast(void *buf, int bytes, int root)
{
    if (mpi.bcast(buf, bytes, mpi.t_byte, root, mpi.world) != 0)
        return mrt_set_error(MRT_ERR_DEVICE, "MPI_Bcast of %d bytes from rank %d failed (rank %d of %d)", bytes, root,
                             mpi.rank, mpi.size);
    return MRT_OK;
}

int rt_mpi_broken(void) { return mpi.broken; }

void rt_mpi_abort(int code)
{
    if (mpi.active) {
        fflush(stdout);
        fflush(stderr);
        mpi.abort_(mpi.world, code);
    }
}

void rt_mpi_finish(void)
{
    if (mpi.active) {
        mpi.finalize();
        mpi.active = 0;
    }
}
