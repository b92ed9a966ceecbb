/* shared_lines_check.c: threads.c charges a split for the lines of C two threads
 * write (tests/test_thread_split.py).
 *
 * Includes threads.c itself.  C is 128 x 32 in four 64 x 16 items of equal time,
 * on two threads.  Split by rows, each thread reaches 64 + 32 of A's rows and B's
 * columns; by columns 128 + 16: with no lines shared the split by rows wins on
 * reach.  When C's columns are not whole lines apart (ldc 129) row 64 starts no
 * line, every column's line there would be written by both threads, and the split
 * by columns must win; with ldc 128 (f32: 512 bytes) the split by rows stays.
 * Prints "ok" or what went wrong, and exits 1. */
#include <stdio.h>

#include "threads.c"

static int split_by(int64_t ldc, int64_t elem, double sec, double *load)
{
    at_item it[4];
    for (int k = 0; k < 4; k++)
        it[k] = (at_item){.i0 = (k / 2) * 64, .j0 = (k % 2) * 16, .sec = sec, .mb = 64, .nb = 16, .thread = 0};
    *load = at__split_threads(it, 4, 128, 32, 64, 16, 2, 0, ldc, elem);
    /* 'r': both items of a row band on one thread, 'c': of a column panel. */
    if (it[0].thread == it[1].thread && it[2].thread == it[3].thread && it[0].thread != it[2].thread) return 'r';
    if (it[0].thread == it[2].thread && it[1].thread == it[3].thread && it[0].thread != it[1].thread) return 'c';
    return '?';
}

int main(void)
{
    double load;
    int got = split_by(128, 4, 1e-6, &load);
    if (got != 'r' || load != 2e-6) {
        printf("ldc 128: split '%c', load %g; want rows, 2e-06\n", got, load);
        return 1;
    }
    got = split_by(129, 4, 1e-6, &load);
    if (got != 'c' || load != 2e-6) {
        printf("ldc 129: split '%c', load %g; want columns, 2e-06\n", got, load);
        return 1;
    }
    /* f64 rows of 64 are 512 bytes: with ldc 64 nothing is shared, rows again. */
    got = split_by(64 * 2, 8, 1e-6, &load);
    if (got != 'r') {
        printf("f64 ldc 128: split '%c'; want rows\n", got);
        return 1;
    }
    printf("ok\n");
    return 0;
}
