/* lpt_check.c: threads.c's order for longest processing time first, bucketed by
 * predicted time, against qsort with LPT's comparator (tests/test_thread_split.py).
 *
 * Includes threads.c itself: lpt_sort and lpt_order are its statics.  Item sets
 * are random, seeded from argv[1]: few distinct times (the bucketed path), more
 * than AT_LPT_KINDS (the sorted one), ties everywhere, and now and then a NaN.
 * Prints "ok" or the first set whose order differs, and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "threads.c"

int main(int argc, char **argv)
{
    srand(argc > 1 ? (unsigned)atoi(argv[1]) : 1u);
    for (int trial = 0; trial < 3000; trial++) {
        int64_t n = rand() % 400;
        int kinds = 1 + rand() % (2 * AT_LPT_KINDS);
        size_t cap = (size_t)(n ? n : 1);
        at_item *it = calloc(cap, sizeof *it);
        at_lpt *got = malloc(cap * sizeof *got), *want = malloc(cap * sizeof *want);
        int32_t *kind = malloc(cap * sizeof *kind);
        if (!it || !got || !want || !kind) return 3;
        for (int64_t k = 0; k < n; k++) {
            it[k].sec = (rand() % kinds) * 1.5e-7;
            if (trial % 97 == 0 && rand() % 50 == 0) it[k].sec = NAN;
        }
        for (int64_t k = 0; k < n; k++) {
            want[k].sec = it[k].sec;
            want[k].idx = k;
        }
        qsort(want, cap, sizeof *want, lpt_order);
        lpt_sort(got, it, n, kind);
        int any_nan = 0;
        for (int64_t k = 0; k < n; k++) any_nan |= isnan(it[k].sec);
        /* With a NaN both take qsort's order of the same array; without one they must agree. */
        for (int64_t k = 0; k < n && !any_nan; k++)
            if (got[k].idx != want[k].idx) {
                printf("set %d (n %lld, %d times): item %lld is %lld, qsort has %lld\n", trial, (long long)n,
                       kinds, (long long)k, (long long)got[k].idx, (long long)want[k].idx);
                return 1;
            }
        free(it);
        free(got);
        free(want);
        free(kind);
    }
    printf("ok\n");
    return 0;
}
