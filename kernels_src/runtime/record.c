/* record.c: AUTOTUNE_RECORD, the shapes a program plans, for `autotune install --shapes`.
 *
 * With AUTOTUNE_RECORD=path in the environment, every plan the library builds
 * appends one JSON line to that file: the column-major problem it computes (a
 * row-major call is recorded as the transposed product it runs) and its thread
 * count.  Plans are cached, so a program's hot loop adds one line per shape,
 * not per call; the reader counts and deduplicates.  One write(2) per line on
 * an O_APPEND descriptor: lines of concurrent threads and processes (a forked
 * worker keeps the descriptor) never interleave. */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "at_internal.h"

static pthread_once_t record_once = PTHREAD_ONCE_INIT;
static int record_fd = -1;

static void open_record(void)
{
    const char *path = getenv("AUTOTUNE_RECORD");
    if (path && *path) record_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

void at__record_shape(int dtype, int ta, int tb, int64_t M, int64_t N, int64_t K, int threads)
{
    pthread_once(&record_once, open_record);
    if (record_fd < 0) return;
    char line[192];
    int n = snprintf(line, sizeof line,
                     "{\"dtype\":\"%s\",\"trans\":\"%c%c\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"threads\":%d}\n",
                     dtype == AT_F64 ? "f64" : "f32", ta ? 't' : 'n', tb ? 't' : 'n', (long long)M,
                     (long long)N, (long long)K, threads);
    if (n > 0 && n < (int)sizeof line && write(record_fd, line, (size_t)n) < 0) {
        /* A full disk or a closed file must not disturb the product: stop recording. */
        record_fd = -1;
    }
}
