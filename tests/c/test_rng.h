/* The tests' C drivers' random numbers: xorshift64*, seeded the same in every run so a
 * failing case is found again by running the driver again. */
#ifndef AT_TEST_RNG_H
#define AT_TEST_RNG_H
#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static inline uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}
/* Uniform in [-1, 1): the top 53 bits as a double. */
static inline double urand(void) { return (double)(next() >> 11) * (2.0 / 9007199254740992.0) - 1.0; }
#endif
