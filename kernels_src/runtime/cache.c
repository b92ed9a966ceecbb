/* cache.c: the bounded, thread-safe plan cache behind every convenience entry.
 *
 * 4-way set-associative with least-recently-used replacement inside a set: the
 * bound is fixed (AT_CACHE_SETS * 4 plans) and a lookup touches one set.  The
 * key is everything that changes a plan: dtype, layout, transpositions, the
 * three dimensions, the three leading dimensions and the thread count.  Each
 * plan is reference counted, so evicting a plan another thread is executing
 * only drops the cache's reference.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"

#define AT_CACHE_SETS 128
#define AT_CACHE_WAYS 4

typedef struct {
    int64_t v[10];
} at_key;

typedef struct {
    at_key key;
    at_plan *plan;
    uint64_t used;
} at_slot;

static at_slot cache[AT_CACHE_SETS][AT_CACHE_WAYS];
static uint64_t cache_tick;
static int64_t cache_created, cache_hits;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const at_key *k)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 10; i++) {
        h ^= (uint64_t)k->v[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

at_plan *at__plan_acquire(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                          int64_t K, int64_t lda, int64_t ldb, int64_t ldc)
{
    int threads = at__num_threads();
    at_key k = {{(int64_t)dtype | (int64_t)layout << 8 | (int64_t)trans_a << 16 |
                     (int64_t)trans_b << 24,
                 M, N, K, lda, ldb, ldc, threads, (int64_t)at__params_generation(), 0}};
    at_slot *set = cache[key_hash(&k) % AT_CACHE_SETS];
    pthread_mutex_lock(&cache_lock);
    for (int w = 0; w < AT_CACHE_WAYS; w++)
        if (set[w].plan && memcmp(&set[w].key, &k, sizeof k) == 0) {
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
    int victim = 0;
    for (int w = 0; w < AT_CACHE_WAYS; w++) {
        if (set[w].plan && memcmp(&set[w].key, &k, sizeof k) == 0) {
            /* Another thread planned the same shape meanwhile: keep one. */
            at_plan *q = set[w].plan;
            atomic_fetch_add(&q->refs, 1);
            set[w].used = ++cache_tick;
            pthread_mutex_unlock(&cache_lock);
            at__plan_free(p);
            return q;
        }
        if (!set[w].plan || set[w].used < set[victim].used) victim = w;
        if (!set[victim].plan) break;
    }
    at_plan *old = set[victim].plan;
    set[victim].key = k;
    set[victim].plan = p;
    set[victim].used = ++cache_tick;
    atomic_fetch_add(&p->refs, 1); /* the caller's reference besides the cache's */
    pthread_mutex_unlock(&cache_lock);
    if (old) at__plan_release(old);
    return p;
}

void at__plan_release(at_plan *plan)
{
    if (plan && atomic_fetch_sub(&plan->refs, 1) == 1) at__plan_free(plan);
}

void at_plan_cache_clear(void)
{
    at_plan *drop[AT_CACHE_SETS * AT_CACHE_WAYS];
    int n = 0;
    pthread_mutex_lock(&cache_lock);
    for (int s = 0; s < AT_CACHE_SETS; s++)
        for (int w = 0; w < AT_CACHE_WAYS; w++)
            if (cache[s][w].plan) {
                drop[n++] = cache[s][w].plan;
                cache[s][w].plan = NULL;
            }
    pthread_mutex_unlock(&cache_lock);
    for (int i = 0; i < n; i++) at__plan_release(drop[i]);
}

void at_plan_cache_stats(int64_t *created, int64_t *hits)
{
    pthread_mutex_lock(&cache_lock);
    if (created) *created = cache_created;
    if (hits) *hits = cache_hits;
    pthread_mutex_unlock(&cache_lock);
}
