/* exec.c: the plan executor.  It makes no decision the plan has not made: it
 * walks the steps of each thread's share, packing panels where the plan says. */
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"
#ifdef AT_SME2_EXEC
#include "at_sme2.h" /* Arm sme2 libraries only: the streaming executor */
#define AT_STREAMING(p) ((p)->streaming)
#else
#define AT_STREAMING(p) 0 /* no SME2 kernel in the library: no plan has SME2 steps */
#endif

typedef struct {
    const at_plan *p;
    int64_t batch;
    int nworkers;
    double alpha, beta;
    const void *const *A;
    const void *const *B;
    void *const *C;
    const char *A0, *B0;
    char *C0;
    int64_t sa, sb, sc; /* bytes between batch items */
    _Atomic int rc;
} at_job;

static void item_ptrs(const at_job *j, int64_t i, const void **a, const void **b, void **c)
{
    if (j->A) {
        *a = j->A[i];
        *b = j->B[i];
        *c = j->C[i];
    } else {
        *a = j->A0 + i * j->sa;
        *b = j->B0 + i * j->sb;
        *c = j->C0 + i * j->sc;
    }
}

/* A packed plan run by a team of threads (exec_t.h, team_part): what they share. */
typedef struct {
    const at_plan *p;
    int threads;
    const void *A, *B; /* after the row-major swap */
    void *C;
    double alpha, beta;
    at_team_barrier barrier;
    _Atomic int failed;  /* a thread could not have its memory: the team declines */
    _Atomic int rc;
    void *panel[2];      /* two panels of B, set by thread 0 */
    size_t panel_bytes;
    const int32_t *grid; /* block (ib, jb) is blocks[grid[jb * nbm + ib]] */
    const int32_t *bands, *sb, *bw; /* tiling_bands' and panel_bands' */
    int64_t nbands[4];
    int cls[4];
} at_team;

/* The team's B panels, kept from call to call (fresh pages cost their faults
 * on every call).  Only thread 0 of a team region touches them, and one region
 * runs at a time (pool.c), so they need no lock.  Their size is bounded by the
 * largest blk_k x blk_n of a plan, so they do not grow without bound. */
static void *team_memory;
static size_t team_memory_bytes;

static int team_panels(at_team *tm)
{
    size_t half = (tm->panel_bytes + 63) / 64 * 64;
    if (team_memory_bytes < 2 * half) {
        free(team_memory);
        team_memory_bytes = 0;
        team_memory = aligned_alloc(64, 2 * half);
        if (!team_memory) return 0;
        team_memory_bytes = 2 * half;
    }
    tm->panel[0] = team_memory;
    tm->panel[1] = (char *)team_memory + half;
    return 1;
}

#define AT_T float
#define AT_KFN at_sgemm_fn
#define AT_FN(name) name##_f32
#include "exec_t.h"
#undef AT_T
#undef AT_KFN
#undef AT_FN

#define AT_T double
#define AT_KFN at_dgemm_fn
#define AT_FN(name) name##_f64
#include "exec_t.h"
#undef AT_T
#undef AT_KFN
#undef AT_FN

static int run_item(const at_plan *p, int t0, int t1, const void *A, const void *B, void *C,
                    double alpha, double beta)
{
    if (p->info.layout == AT_ROW_MAJOR) {
        /* The plan computes C^T = op(B)^T op(A)^T: the operands trade places. */
        const void *t = A;
        A = B;
        B = t;
    }
    return p->info.dtype == AT_F32 ? run_item_f32(p, t0, t1, A, B, C, alpha, beta)
                                   : run_item_f64(p, t0, t1, A, B, C, alpha, beta);
}

/* One problem, thread t runs the plan's share t. */
static void task_parts(void *ctx, int t)
{
    at_job *j = ctx;
    const void *a, *b;
    void *c;
    item_ptrs(j, 0, &a, &b, &c);
    int rc = run_item(j->p, t, t + 1, a, b, c, j->alpha, j->beta);
    if (rc) atomic_store(&j->rc, rc);
}

/* A batch: worker t runs a contiguous range of whole items, each with every share
 * of the plan in turn, so the result of an item never depends on the split. */
static void task_items(void *ctx, int t)
{
    at_job *j = ctx;
    int64_t lo = j->batch * t / j->nworkers, hi = j->batch * (t + 1) / j->nworkers;
    int rc = j->p->info.dtype == AT_F32 ? run_items_f32(j, lo, hi) : run_items_f64(j, lo, hi);
    if (rc) atomic_store(&j->rc, rc);
}

static _Atomic int64_t team_runs, team_declined;

void at_team_stats(int64_t *teams, int64_t *declined)
{
    if (teams) *teams = atomic_load(&team_runs);
    if (declined) *declined = atomic_load(&team_declined);
}

static void task_team(void *ctx, int t)
{
    at_team *tm = ctx;
    int rc = tm->p->info.dtype == AT_F32 ? team_part_f32(tm, t) : team_part_f64(tm, t);
    if (rc) atomic_store(&tm->rc, rc);
}

/* A packed product on plan->info.threads threads at once, packing each panel
 * of B once for all of them (exec_t.h, team_part); 0 when it declined (no team
 * to be had, no memory, a plan it does not take) and the caller runs the
 * plan's own shares. */
static int run_team(const at_plan *p, const void *A, const void *B, void *C, double alpha,
                    double beta, int *rc)
{
    int T = p->info.threads;
    if (T < 2 || p->info.path != 1 || AT_STREAMING(p) || p->K == 0 || alpha == 0 || p->nblocks < 1)
        return 0;
    int64_t bm = p->info.blk_m, bn = p->info.blk_n, bk = p->info.blk_k;
    int64_t nbm = (p->M + bm - 1) / bm, nbn = (p->N + bn - 1) / bn;
    if (nbm * nbn != p->nblocks) return 0;
    size_t es = p->info.dtype == AT_F32 ? sizeof(float) : sizeof(double);
    if (p->info.layout == AT_ROW_MAJOR) {
        const void *t = A;
        A = B;
        B = t;
    }
    int nt = p->ntilings;
    int32_t *mem = malloc(sizeof *mem * (size_t)(p->nblocks + 3 * nt * (bm + 1) + p->N));
    if (!mem) {
        atomic_fetch_add(&team_declined, 1);
        return 0;
    }
    at_team tm = {p, T, A, B, C, alpha, beta, {0, 0, T}, 0, 0, {NULL, NULL},
                  es * (size_t)bk * ((size_t)bn + AT_PANEL_PAD / es), mem, NULL, NULL, NULL, {0}, {0}};
    int32_t *grid = mem, *bands = grid + p->nblocks, *sb = bands + 2 * nt * bm, *bw = sb + nt * (bm + 1);
    for (int64_t g = 0; g < p->nblocks; g++)
        grid[p->blocks[g].j0 / bn * nbm + p->blocks[g].i0 / bm] = (int32_t)g;
    tiling_bands(p, bm, p->ktrans_a, bands, sb, tm.nbands, tm.cls);
    if (p->ktrans_b)
        for (int64_t jb = 0; jb < nbn; jb++) panel_bands(p, grid + jb * nbm, 0, nbm, bw);
    tm.bands = bands;
    tm.sb = sb;
    tm.bw = bw;
    int ran = at__parallel_team(T, task_team, &tm) && !atomic_load(&tm.failed);
    atomic_fetch_add(ran ? &team_runs : &team_declined, 1);
    free(mem);
    if (ran) *rc = atomic_load(&tm.rc);
    return ran;
}

static int cmp_addr(const void *x, const void *y)
{
    uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
    return (a > b) - (a < b);
}

/* Whether two items of a batch may write the same element of C: their byte
 * ranges overlap.  Conservative (interleaved items that share no element count
 * too): the answer only decides whether the items run one after another, and
 * serial is always right.  A batch that sums several products into one C
 * (every pointer the same, or stride 0) is the case this exists for: the items'
 * threads would otherwise race on C's read-modify-write and lose products. */
static int c_items_overlap(const at_plan *p, int64_t batch, void *const *C, int64_t sc_bytes)
{
    size_t es = p->info.dtype == AT_F32 ? sizeof(float) : sizeof(double);
    uint64_t extent = ((uint64_t)(p->N - 1) * (uint64_t)p->ldc + (uint64_t)p->M) * es;
    if (!C) {
        uint64_t step = sc_bytes < 0 ? (uint64_t)0 - (uint64_t)sc_bytes : (uint64_t)sc_bytes;
        return step < extent;
    }
    /* Pointers in increasing order (items allocated one after another, the
     * common case) are judged in one pass. */
    int64_t i = 1;
    for (; i < batch && (uintptr_t)C[i] >= (uintptr_t)C[i - 1]; i++)
        if ((uintptr_t)C[i] - (uintptr_t)C[i - 1] < extent) return 1;
    if (i == batch) return 0;
    /* Otherwise buckets of a power of two >= extent: two items overlap only if
     * their starts are less than extent apart, so in the same or neighbouring
     * buckets, and a bucket holds one start until an overlap is found.  Linear
     * where a sort of a shuffled batch of 10,000 tiny products cost as much as
     * computing it; the sort stays for starts spread too thin for a table. */
    uintptr_t lo = (uintptr_t)C[0], hi = lo;
    for (i = 1; i < batch; i++) {
        uintptr_t c = (uintptr_t)C[i];
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
    }
    int shift = 0;
    while (shift < 62 && ((uint64_t)1 << shift) < extent) shift++;
    uint64_t buckets = ((uint64_t)(hi - lo) >> shift) + 1;
    if (buckets <= 4 * (uint64_t)batch) {
        uintptr_t *slot = calloc((size_t)buckets, sizeof *slot); /* start - lo + 1; 0: empty */
        if (!slot) return 1;
        int overlap = 0;
        for (i = 0; i < batch && !overlap; i++) {
            uintptr_t v = (uintptr_t)C[i] - lo + 1;
            uint64_t b = (uint64_t)(v - 1) >> shift;
            for (uint64_t d = b ? b - 1 : 0; d <= b + 1 && d < buckets && !overlap; d++)
                if (slot[d]) overlap = (slot[d] > v ? slot[d] - v : v - slot[d]) < extent;
            slot[b] = v;
        }
        free(slot);
        return overlap;
    }
    uintptr_t *start = malloc(sizeof *start * (size_t)batch);
    if (!start) return 1; /* no memory to look: serial, still the right answer */
    for (i = 0; i < batch; i++) start[i] = (uintptr_t)C[i];
    qsort(start, (size_t)batch, sizeof *start, cmp_addr);
    int overlap = 0;
    for (i = 1; i < batch && !overlap; i++) overlap = start[i] - start[i - 1] < extent;
    free(start);
    return overlap;
}

/* A chunked plan (plan.c) on operands in the column-major problem's order:
 * each chunk, column of chunks by column, through the plan of its shape, on
 * the operands offset to it (the elements of the whole problem it covers). */
static int run_chunks(const at_plan *p, int64_t batch, double alpha, const void *const *A,
                      const void *const *B, double beta, void *const *C, const char *A0,
                      int64_t sa, const char *B0, int64_t sb, char *C0, int64_t sc)
{
    size_t es = p->info.dtype == AT_F32 ? sizeof(float) : sizeof(double);
    int64_t cm = p->chunk_m, cn = p->chunk_n;
    int64_t nm = p->M / cm + (p->M % cm != 0), nn = p->N / cn + (p->N % cn != 0);
    const void **ptrs = NULL;
    if (A) {
        ptrs = malloc(sizeof *ptrs * 3 * (size_t)batch);
        if (!ptrs) {
            at__set_error("out of memory for a batch of %lld items", (long long)batch);
            return AT_ENOMEM;
        }
    }
    int rc = AT_OK;
    for (int64_t jc = 0; jc < nn && !rc; jc++)
        for (int64_t ic = 0; ic < nm && !rc; ic++) {
            int s = (ic == nm - 1 && p->M % cm) | (jc == nn - 1 && p->N % cn) << 1;
            int64_t r0 = ic * cm, c0 = jc * cn;
            size_t oa = (size_t)(p->ta ? r0 * p->lda : r0) * es;
            size_t ob = (size_t)(p->tb ? c0 : c0 * p->ldb) * es;
            size_t oc = (size_t)(r0 + c0 * p->ldc) * es;
            if (A) {
                for (int64_t i = 0; i < batch; i++) {
                    ptrs[i] = (const char *)A[i] + oa;
                    ptrs[batch + i] = (const char *)B[i] + ob;
                    ptrs[2 * batch + i] = (char *)C[i] + oc;
                }
                rc = at__execute(p->sub[s], batch, alpha, ptrs, ptrs + batch, beta,
                                 (void *const *)(ptrs + 2 * batch), NULL, 0, NULL, 0, NULL, 0);
            } else {
                rc = at__execute(p->sub[s], batch, alpha, NULL, NULL, beta, NULL, A0 + oa, sa,
                                 B0 + ob, sb, C0 + oc, sc);
            }
        }
    free(ptrs);
    return rc;
}

int at__execute(const at_plan *plan, int64_t batch, double alpha, const void *const *A,
                const void *const *B, double beta, void *const *C, const void *A0, int64_t sa,
                const void *B0, int64_t sb, void *C0, int64_t sc)
{
    if (!plan || batch < 0) return AT_EINVAL;
    if (batch == 0 || plan->M == 0 || plan->N == 0) return AT_OK;
    if (plan->chunk_m) {
        if (plan->info.layout == AT_ROW_MAJOR) {
            /* The chunks' plans are column-major: the operands trade places here. */
            const void *const *t = A;
            A = B;
            B = t;
            const void *t0 = A0;
            A0 = B0;
            B0 = t0;
            int64_t ts = sa;
            sa = sb;
            sb = ts;
        }
        size_t es = plan->info.dtype == AT_F32 ? sizeof(float) : sizeof(double);
        if (batch > 1 && c_items_overlap(plan, batch, C, sc * (int64_t)es)) {
            /* Items sharing C run whole, one after another (see below). */
            for (int64_t i = 0; i < batch; i++) {
                const void *a = A ? A[i] : (const char *)A0 + i * sa * (int64_t)es;
                const void *b = B ? B[i] : (const char *)B0 + i * sb * (int64_t)es;
                void *c = C ? C[i] : (char *)C0 + i * sc * (int64_t)es;
                int rc = run_chunks(plan, 1, alpha, NULL, NULL, beta, NULL, a, 0, b, 0, c, 0);
                if (rc) return rc;
            }
            return AT_OK;
        }
        return run_chunks(plan, batch, alpha, A, B, beta, C, A0, sa, B0, sb, C0, sc);
    }
    int T = plan->info.threads;
    if (batch == 1 && T <= 1) {
        /* One problem, one share: straight to the steps, no job and no pool. */
        const void *a = A ? A[0] : A0, *b = B ? B[0] : B0;
        void *c = C ? C[0] : C0;
        return plan->info.dtype == AT_F32 ? run_one_f32(plan, a, b, c, alpha, beta)
                                          : run_one_f64(plan, a, b, c, alpha, beta);
    }
    size_t es = plan->info.dtype == AT_F32 ? sizeof(float) : sizeof(double);
    at_job j = {plan, batch, 1, alpha, beta, A, B, C, A0, B0, C0,
                sa * (int64_t)es, sb * (int64_t)es, sc * (int64_t)es, 0};
    if (batch == 1) {
        const void *a, *b;
        void *c;
        item_ptrs(&j, 0, &a, &b, &c);
        int rc;
        if (run_team(plan, a, b, c, alpha, beta, &rc)) return rc;
        at__parallel(T, task_parts, &j);
    } else {
        int n = at__num_threads();
        /* Small items share threads by item; one thread per item is the least
         * synchronisation that keeps every core busy. */
        double flops = 2.0 * (double)plan->M * (double)plan->N * (double)plan->K * (double)batch;
        if (flops < plan->thread_flops) n = 1;
        if (n > batch) n = (int)batch;
        if (n > 1 && c_items_overlap(plan, batch, C, j.sc)) {
            /* Items sharing C run in item order, as a loop of single calls would;
             * each still gets the threads its own plan splits it over. */
            if (T <= 1) {
                task_items(&j, 0);
                return atomic_load(&j.rc);
            }
            for (int64_t i = 0; i < batch; i++) {
                const void *a, *b;
                void *c;
                item_ptrs(&j, i, &a, &b, &c);
                int rc = at__execute(plan, 1, alpha, NULL, NULL, beta, NULL, a, 0, b, 0, c, 0);
                if (rc) return rc;
            }
            return AT_OK;
        }
        j.nworkers = n;
        if (n <= 1)
            task_items(&j, 0);
        else
            at__parallel(n, task_items, &j);
    }
    return atomic_load(&j.rc);
}

void at__direct_run_float(const at_plan *p, float alpha, const float *A, const float *B,
                          float beta, float *C)
{
    AT_DIRECT_RUN(at_sgemm_fn, p->direct, p->single_steps, p->K, A, p->lda, B, p->ldb, C, p->ldc,
                  alpha, beta);
}

void at__direct_run_double(const at_plan *p, double alpha, const double *A, const double *B,
                           double beta, double *C)
{
    AT_DIRECT_RUN(at_dgemm_fn, p->direct, p->single_steps, p->K, A, p->lda, B, p->ldb, C, p->ldc,
                  alpha, beta);
}

int at__execute_one(const at_plan *plan, double alpha, const void *A, const void *B, double beta,
                    void *C)
{
    if (!plan) return AT_EINVAL;
    if (plan->M == 0 || plan->N == 0) return AT_OK;
    if (plan->info.threads > 1 || plan->chunk_m)
        return at__execute(plan, 1, alpha, NULL, NULL, beta, NULL, A, 0, B, 0, C, 0);
    return plan->info.dtype == AT_F32 ? run_one_f32(plan, A, B, C, alpha, beta)
                                      : run_one_f64(plan, A, B, C, alpha, beta);
}

int at_plan_execute(const at_plan *plan, double alpha, const void *A, const void *B, double beta,
                    void *C)
{
    if (plan && (plan->single || plan->single_steps)) {
        if (plan->info.dtype == AT_F32 && at__single_ready_float(plan, (float)alpha)) {
            at__single_run_float(plan, (float)alpha, A, B, (float)beta, C);
            return AT_OK;
        }
        if (plan->info.dtype == AT_F64 && at__single_ready_double(plan, alpha)) {
            at__single_run_double(plan, alpha, A, B, beta, C);
            return AT_OK;
        }
    }
    return at__execute_one(plan, alpha, A, B, beta, C);
}

int at_plan_execute_batch(const at_plan *plan, int64_t batch, double alpha, const void *A,
                          int64_t stride_a, const void *B, int64_t stride_b, double beta, void *C,
                          int64_t stride_c)
{
    return at__execute(plan, batch, alpha, NULL, NULL, beta, NULL, A, stride_a, B, stride_b, C,
                       stride_c);
}

int at_plan_execute_ptrs(const at_plan *plan, int64_t batch, double alpha, const void *const *A,
                         const void *const *B, double beta, void *const *C)
{
    if (batch > 0 && (!A || !B || !C)) return AT_EINVAL;
    return at__execute(plan, batch, alpha, A, B, beta, C, NULL, 0, NULL, 0, NULL, 0);
}
