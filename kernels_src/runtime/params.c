/* params.c: the planner's parameters in force, and their replacement at run time.
 *
 * The baked table's at_params unless at_params_set replaced them (the tuner tries
 * settings this way without rebuilding the library).  A plan is made from one
 * snapshot, copied under the lock when planning starts, so a concurrent
 * at_params_set never mixes two settings in one plan; every set bumps a
 * generation the plan cache keys on, so no plan of old parameters is found again
 * (the cache drops them itself when it sees the generation move: the cache
 * depends on this unit, never the other way).
 * The fields are declared once, in autotune/params.py.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "at_internal.h"

static pthread_mutex_t params_lock = PTHREAD_MUTEX_INITIALIZER;
static at_tune_params params_live;
static int params_replaced;
_Atomic uint64_t at__params_gen;

void at__params_snapshot(at_tune_params *out)
{
    pthread_mutex_lock(&params_lock);
    *out = params_replaced ? params_live : at_params;
    pthread_mutex_unlock(&params_lock);
}

void at__params_fork(int phase)
{
    if (phase == AT_FORK_PREPARE) {
        pthread_mutex_lock(&params_lock);
    } else if (phase == AT_FORK_PARENT) {
        pthread_mutex_unlock(&params_lock);
    } else {
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        params_lock = fresh;
    }
}

int at_params_get(at_tune_params *out)
{
    if (!out) return AT_EINVAL;
    at__params_snapshot(out);
    /* The values in force, not the zeros that stand for them. */
    for (int d = 0; d < 2; d++) {
        out->call_seconds[d] = at__weight(out->call_seconds[d], at_params_builtin.call_seconds[d]);
        out->edge_frac[d] = at__weight(out->edge_frac[d], at_params_builtin.edge_frac[d]);
        out->pack_seconds[d] = at__weight(out->pack_seconds[d], at_params_builtin.pack_seconds[d]);
    }
    return AT_OK;
}

static int nonneg(double v) { return isfinite(v) && v >= 0; }

/* 0 (the table's choice) or 1 + the index of a kernel of dtype d. */
static int kernel_of(int32_t v, int d)
{
    return v == 0 || (v > 0 && v <= at_kernel_table_count && at_kernel_table[v - 1].kernel.dtype == d);
}

/* 0 or 1 + the index of a kernel of dtype d and transposition trans (2 ta + tb). */
static int kernel_of_trans(int32_t v, int d, int trans)
{
    if (!kernel_of(v, d)) return 0;
    const at_kernel *k = v ? &at_kernel_table[v - 1].kernel : NULL;
    return !k || k->trans_a * 2 + k->trans_b == trans;
}

int at_params_set(const at_tune_params *in)
{
    if (in) {
        int ok = nonneg(in->thread_flops) && nonneg(in->thread_seconds);
        for (int d = 0; d < 2; d++)
            ok = ok && in->blk_m[d] >= 0 && in->blk_n[d] >= 0 && in->blk_k[d] >= 0 &&
                 nonneg(in->pack_flops[d]) && nonneg(in->pack_flops_tn[d]) && nonneg(in->call_seconds[d]) &&
                 nonneg(in->place_stream_bytes[d]) &&
                 nonneg(in->edge_frac[d]) && in->edge_frac[d] <= 1 &&
                 nonneg(in->pack_seconds[d]) && in->grid[d] >= 0 && in->grid[d] <= 2 &&
                 kernel_of(in->pack_kernel[d], d) && kernel_of_trans(in->place_kernel_nn[d], d, 0) &&
                 kernel_of_trans(in->place_kernel_nt[d], d, 1) && kernel_of_trans(in->place_kernel_tn[d], d, 2) &&
                 kernel_of_trans(in->place_kernel_tt[d], d, 3);
        if (!ok) {
            at__set_error("at_params_set: blocks, thresholds and weights must be finite and "
                          ">= 0, edge_frac <= 1, grid 0..2, pack_kernel 0 or 1 + the index of "
                          "one of the library's kernels of its dtype, place_kernel_* 0 or one of "
                          "its dtype and transposition");
            return AT_EINVAL;
        }
    }
    pthread_mutex_lock(&params_lock);
    if (in) params_live = *in;
    params_replaced = in != NULL;
    atomic_fetch_add(&at__params_gen, 1);
    pthread_mutex_unlock(&params_lock);
    return AT_OK;
}
