/* cache.c: the bounded, thread-safe plan cache behind every convenience entry.
 *
 * Two levels.  In front, each thread keeps its last AT_TLS_WAYS plans in a
 * private most-recently-used list: a hit there takes no lock and touches no
 * shared cache line (no atomic reference count either: the entry owns one
 * reference, and only its thread drops it), which is what a 2x2x2 call can
 * afford.  Behind it, the shared cache: 4-way set-associative with
 * least-recently-used replacement inside a set, so a lookup touches one set.
 *
 * Both are bounded in bytes as well as in plans: a plan's size varies by orders
 * of magnitude (a tall, thin C's no-pack plan lists a step per few rows), and
 * 400 tall shapes once held 1.6 GB in 512 slots.  The shared cache keeps at
 * most AT_CACHE_BYTES of plans, evicting the least recently used anywhere when
 * a new plan needs the room; a plan above that is not kept, and a front cache
 * keeps none above AT_FRONT_MAX_BYTES (a thread's four entries would otherwise
 * pin their size after the shared cache let them go).
 *
 * The key is everything that changes a plan: dtype, layout, transpositions, the
 * three dimensions, the three leading dimensions, the thread count and the
 * parameter generation, packed into 64-bit words compared with xor/or (no
 * memcmp call).  Plans are reference counted, so evicting a plan another
 * thread is executing only drops the cache's reference.
 *
 * A plan of older parameters is never found again, so the first shared lookup
 * after at_params_set drops them all; the cache asks params.c for the
 * generation, and params.c knows nothing of the cache.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"

#define AT_CACHE_SETS 128
#define AT_CACHE_WAYS 4
#define AT_CACHE_BYTES ((size_t)32 << 20)
#define AT_FRONT_MAX_BYTES (AT_CACHE_BYTES / 8)

typedef struct {
    at_key key;
    at_plan *plan;
    uint64_t used;
} at_slot;

static at_slot cache[AT_CACHE_SETS][AT_CACHE_WAYS];
static uint64_t cache_tick;
static int64_t cache_created, cache_hits;
static size_t cache_bytes; /* of the plans in the shared cache, under cache_lock */
/* The parameter generation of the plans in the shared cache: written under
 * cache_lock, read without it to keep the check off a hit's path. */
static _Atomic uint64_t cache_gen;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

_Thread_local at_tcache *at__tcache AT_TLS_FAST;
_Atomic uint64_t at__clear_epoch;
static at_tcache *tcache_list;  /* every live thread's front cache, under cache_lock */
static int64_t retired_hits;    /* hits of front caches whose thread has exited */
static pthread_key_t tcache_key;
static pthread_once_t tcache_once = PTHREAD_ONCE_INIT;
static int tcache_key_ok;

/* ---- fork ------------------------------------------------------------------
 * A lock another thread holds at fork() stays held forever in the child, which
 * has only the forking thread: the child's next plan would wait on it.  Before
 * the fork the forking thread takes every lock of the library (in one order;
 * no code path nests them), so the child copies them unlocked and the data
 * they guard consistent; the parent releases them, the child starts them anew.
 * The thread pool resets itself (pool.c).  glibc forgets the handlers of a
 * library that is dlclose'd. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&cache_lock);
    at__params_fork(AT_FORK_PREPARE);
}

static void fork_parent(void)
{
    at__params_fork(AT_FORK_PARENT);
    pthread_mutex_unlock(&cache_lock);
}

static void fork_child(void)
{
    at__params_fork(AT_FORK_CHILD);
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    cache_lock = fresh;
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static uint64_t key_hash(const at_key *k)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < AT_KEY_WORDS; i++) {
        h ^= k->w[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Empties the shared cache under cache_lock into drop (room for every slot),
 * returning how many plans the caller must release once it unlocks. */
static int take_all(at_plan **drop)
{
    int n = 0;
    for (int s = 0; s < AT_CACHE_SETS; s++)
        for (int w = 0; w < AT_CACHE_WAYS; w++)
            if (cache[s][w].plan) {
                drop[n++] = cache[s][w].plan;
                cache[s][w].plan = NULL;
            }
    cache_bytes = 0;
    return n;
}

/* The generation only grows; a thread that read an older one is late, and must
 * not throw away the plans of the newer. */
static void drop_stale(void)
{
    uint64_t gen = at__params_generation();
    if (atomic_load_explicit(&cache_gen, memory_order_relaxed) == gen) return;
    at_plan *drop[AT_CACHE_SETS * AT_CACHE_WAYS];
    int n = 0;
    pthread_mutex_lock(&cache_lock);
    if (gen > atomic_load_explicit(&cache_gen, memory_order_relaxed)) {
        n = take_all(drop);
        atomic_store_explicit(&cache_gen, gen, memory_order_relaxed);
    }
    pthread_mutex_unlock(&cache_lock);
    for (int i = 0; i < n; i++) at__plan_release(drop[i]);
}

/* The shared cache's lookup-or-build for key k: returns the plan with one
 * reference for the caller, or NULL when planning runs out of memory. */
static at_plan *shared_acquire(const at_key *k, int dtype, int layout, int trans_a, int trans_b,
                               int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                               int64_t ldc, int threads)
{
    drop_stale();
    at_slot *set = cache[key_hash(k) % AT_CACHE_SETS];
    pthread_mutex_lock(&cache_lock);
    for (int w = 0; w < AT_CACHE_WAYS; w++)
        if (set[w].plan && at__key_eq(&set[w].key, k)) {
            at_plan *p = set[w].plan;
            atomic_fetch_add(&p->refs, 1);
            set[w].used = ++cache_tick;
            cache_hits++;
            pthread_mutex_unlock(&cache_lock);
            return p;
        }
    pthread_mutex_unlock(&cache_lock);

    /* Plan outside the lock: planning a large shape must not stall other callers. */
    at_plan *p = at__plan_build(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, threads);
    if (!p) return NULL;

    pthread_mutex_lock(&cache_lock);
    cache_created++;
    if (p->bytes > AT_CACHE_BYTES || k->w[7] != atomic_load_explicit(&cache_gen, memory_order_relaxed)) {
        /* Kept by no one but the caller: made again on its next use (a plan
         * whose key has parameters replaced meanwhile would never be found). */
        pthread_mutex_unlock(&cache_lock);
        return p;
    }
    int victim = 0;
    for (int w = 0; w < AT_CACHE_WAYS; w++) {
        if (set[w].plan && at__key_eq(&set[w].key, k)) {
            /* Another thread planned the same shape meanwhile: keep one. */
            at_plan *q = set[w].plan;
            atomic_fetch_add(&q->refs, 1);
            set[w].used = ++cache_tick;
            pthread_mutex_unlock(&cache_lock);
            at__plan_free(p);
            return q;
        }
        /* An empty way first (evictions elsewhere leave holes), else the LRU;
         * every way is still compared with the key above. */
        if (set[victim].plan && (!set[w].plan || set[w].used < set[victim].used)) victim = w;
    }
    at_plan *drop[AT_CACHE_SETS * AT_CACHE_WAYS + 1];
    int ndrop = 0;
    if (set[victim].plan) {
        drop[ndrop++] = set[victim].plan;
        cache_bytes -= set[victim].plan->bytes;
        set[victim].plan = NULL;
    }
    /* Room for p: the least recently used plans anywhere go until it fits.  A
     * scan of every slot, but only on a miss, which has just planned. */
    while (cache_bytes + p->bytes > AT_CACHE_BYTES) {
        at_slot *lru = NULL;
        for (int x = 0; x < AT_CACHE_SETS; x++)
            for (int w = 0; w < AT_CACHE_WAYS; w++)
                if (cache[x][w].plan && (!lru || cache[x][w].used < lru->used)) lru = &cache[x][w];
        if (!lru) break;
        drop[ndrop++] = lru->plan;
        cache_bytes -= lru->plan->bytes;
        lru->plan = NULL;
    }
    set[victim].key = *k;
    set[victim].plan = p;
    set[victim].used = ++cache_tick;
    cache_bytes += p->bytes;
    atomic_fetch_add(&p->refs, 1); /* the caller's reference besides the cache's */
    pthread_mutex_unlock(&cache_lock);
    for (int i = 0; i < ndrop; i++) at__plan_release(drop[i]);
    return p;
}

at_plan *at__plan_acquire(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                          int64_t K, int64_t lda, int64_t ldb, int64_t ldc)
{
    int threads = at__num_threads();
    at_key k;
    at__key_make(&k, dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, threads,
                 at__params_generation());
    return shared_acquire(&k, dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, threads);
}

void at__plan_release(at_plan *plan)
{
    if (plan && atomic_fetch_sub(&plan->refs, 1) == 1) at__plan_free(plan);
}

static void tcache_flush(at_tcache *tc)
{
    for (int w = 0; w < AT_TLS_WAYS; w++) {
        at__plan_release(tc->plan[w]);
        tc->plan[w] = NULL;
    }
}

/* Thread exit: drop the entries' references and fold the hits into the total. */
static void tcache_destroy(void *arg)
{
    at_tcache *tc = arg;
    tcache_flush(tc);
    pthread_mutex_lock(&cache_lock);
    retired_hits += atomic_load_explicit(&tc->hits, memory_order_relaxed);
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        tcache_list = tc->next;
    if (tc->next) tc->next->prev = tc->prev;
    pthread_mutex_unlock(&cache_lock);
    /* A later call from another destructor of this thread starts a new one. */
    at__tcache = NULL;
    free(tc);
}

static void tcache_key_init(void) { tcache_key_ok = pthread_key_create(&tcache_key, tcache_destroy) == 0; }

/* This thread's front cache, made on first use; NULL if it cannot be had (no
 * memory, no key for the exit hook), and then the caller uses the shared cache. */
static at_tcache *tcache_get(void)
{
    at_tcache *tc = at__tcache;
    if (tc) return tc;
    pthread_once(&tcache_once, tcache_key_init);
    if (!tcache_key_ok) return NULL;
    tc = calloc(1, sizeof *tc);
    if (!tc) return NULL;
    if (pthread_setspecific(tcache_key, tc) != 0) {
        free(tc);
        return NULL;
    }
    pthread_mutex_lock(&cache_lock);
    tc->next = tcache_list;
    if (tcache_list) tcache_list->prev = tc;
    tcache_list = tc;
    pthread_mutex_unlock(&cache_lock);
    at__tcache = tc;
    return tc;
}

at_plan *at__plan_lookup_slow(const at_key *key, int *owned)
{
    at_key k = *key;
    uint64_t gen = k.w[7];
    int dtype = (int)(k.w[0] & 0xff), layout = (int)(k.w[0] >> 8 & 0xff);
    int trans_a = (int)(k.w[0] >> 16 & 0xff), trans_b = (int)(k.w[0] >> 24 & 0xff);
    int threads = (int)(k.w[0] >> 32);
    int64_t M = (int64_t)k.w[1], N = (int64_t)k.w[2], K = (int64_t)k.w[3];
    int64_t lda = (int64_t)k.w[4], ldb = (int64_t)k.w[5], ldc = (int64_t)k.w[6];
    at_tcache *tc = at__tcache;
    if (tc) {
        uint64_t epoch = atomic_load_explicit(&at__clear_epoch, memory_order_relaxed);
        if (tc->params_gen != gen || tc->epoch != epoch) {
            /* Parameters changed or the cache was cleared: nothing here is current. */
            tcache_flush(tc);
            tc->params_gen = gen;
            tc->epoch = epoch;
        }
        for (int w = 0; w < AT_TLS_WAYS; w++) {
            at_plan *p = tc->plan[w];
            if (p && at__key_eq(&tc->key[w], &k)) {
                if (w > 0) {
                    /* Move to the front so the hottest shape is compared first. */
                    at_key kw = tc->key[w];
                    memmove(&tc->key[1], &tc->key[0], sizeof tc->key[0] * (size_t)w);
                    memmove(&tc->plan[1], &tc->plan[0], sizeof tc->plan[0] * (size_t)w);
                    tc->key[0] = kw;
                    tc->plan[0] = p;
                }
                atomic_store_explicit(
                    &tc->hits, atomic_load_explicit(&tc->hits, memory_order_relaxed) + 1,
                    memory_order_relaxed);
                *owned = 0;
                return p;
            }
        }
    } else {
        tc = tcache_get();
        if (tc) {
            tc->params_gen = gen;
            tc->epoch = atomic_load_explicit(&at__clear_epoch, memory_order_relaxed);
        }
    }
    at_plan *p = shared_acquire(&k, dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc,
                                threads);
    if (!p || !tc || p->bytes > AT_FRONT_MAX_BYTES) {
        *owned = p != NULL;
        return p;
    }
    /* The caller's reference becomes the front entry's; the least recent goes. */
    at_plan *old = tc->plan[AT_TLS_WAYS - 1];
    memmove(&tc->key[1], &tc->key[0], sizeof tc->key[0] * (AT_TLS_WAYS - 1));
    memmove(&tc->plan[1], &tc->plan[0], sizeof tc->plan[0] * (AT_TLS_WAYS - 1));
    tc->key[0] = k;
    tc->plan[0] = p;
    at__plan_release(old);
    *owned = 0;
    return p;
}

void at_plan_cache_clear(void)
{
    at_plan *drop[AT_CACHE_SETS * AT_CACHE_WAYS];
    int n;
    atomic_fetch_add(&at__clear_epoch, 1);
    /* The calling thread's own entries go now; other threads drop theirs on
     * their next lookup (only the owner may touch a front cache). */
    if (at__tcache) tcache_flush(at__tcache);
    pthread_mutex_lock(&cache_lock);
    n = take_all(drop);
    pthread_mutex_unlock(&cache_lock);
    for (int i = 0; i < n; i++) at__plan_release(drop[i]);
}

void at_plan_cache_stats(int64_t *created, int64_t *hits)
{
    pthread_mutex_lock(&cache_lock);
    int64_t h = cache_hits + retired_hits;
    for (const at_tcache *tc = tcache_list; tc; tc = tc->next)
        h += atomic_load_explicit(&tc->hits, memory_order_relaxed);
    if (created) *created = cache_created;
    if (hits) *hits = h;
    pthread_mutex_unlock(&cache_lock);
}
