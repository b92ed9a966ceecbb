/* cost.c: the planner's speed model.  How long a kernel call, a portable edge
 * block or a packed element takes, from the table's measurements (or IAAT's
 * analytic model when the table was emulated) and the tuned cost weights, and
 * the cost grid that holds the best way to compute every block size at one K.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

/* at_planner.h: the parameters of the plan being built.  Defined here, by the
 * unit that reads them most, and set by plan.c: defined in plan.c it made the
 * cost model and the planner call each other. */
_Thread_local const at_tune_params *at__tp AT_TLS_LOCAL;

/* The grid of block sizes is at least this big, so tiny problems can be
 * covered by one portable edge block rather than many kernel calls. */
#define AT_GRID_MIN 8

static double call_seconds(int dtype)
{
    return at__weight(at__tp->call_seconds[dtype], at_params_builtin.call_seconds[dtype]);
}

/* ---- predicted kernel speed ------------------------------------------------ */

static double peak_of(int dtype)
{
    double p = at_facts.peak_gflops[dtype];
    return p > 0 ? p : 10.0;
}

/* An SME2 kernel's model: the instructions it issues per K step, as the
 * generator writes them (docs/arm.md), against one full-tile FMOPA per cycle.
 * Per step: tiles_m x tiles_n FMOPAs; a hybrid's (variant ending in h) SVE rows
 * add sve_rows x tiles_n FMLAs and one broadcast load each; each operand loads
 * its tiles in 4-, 2- and 1-vector groups (a packed panel's two steps at once in
 * the four-step loop, _u4); pointer updates and loop control cost about one
 * instruction per step in the four-step loop and four in the two-step one.
 * The unit is the IAAT model's (one vector FMA of simd_bytes per cycle is the
 * peak), so NEON and SME2 kernels of one library are ranked alike: by flops
 * per instruction issued.
 * Without this, IAAT's memops model ranked the hybrids (36x32: 4 FMOPAs, 8
 * FMLAs and 16 loads per step) above the whole-tile 32x32 (4 FMOPAs, 2-4 loads),
 * though they issue about three times the instructions per flop. */
static double groups(int tiles) { return tiles / 4 + (tiles % 4) / 2 + tiles % 2; }

/* The name's last 'u' (_u<unroll>, specs.py's grammar), or NULL. */
static const char *unroll_mark(const at_kernel *d)
{
    const char *u = NULL;
    for (const char *c = d->name; *c; c++)
        if (*c == 'u') u = c;
    return u;
}

/* A variable-block SME2 kernel (variant ending in v, autotune/families/sme2.py):
 * its streaming entry computes any block up to mr x nr, the extent passed by the
 * executor (sme2_exec_t.h); its instructions per K step are its whole block's,
 * since the predicates only switch lanes off. */
static int sme2_variable(const at_kernel *d)
{
    const char *u = unroll_mark(d);
    return d->svl_bytes > 0 && d->fn_s && u && u > d->name + 1 && u[-2] == 'v' && u[-1] == '_';
}

static double sme2_model_gflops(const at_kernel *d)
{
    int elem = d->dtype == AT_F64 ? 8 : 4;
    int vl = d->svl_bytes / elem;  /* the kernel's record: the SVL it was generated for */
    if (vl < 1) vl = 1;
    const char *u = unroll_mark(d);
    int wide = u && u[1] == '4';
    int hybrid = u && u > d->name + 1 && u[-2] == 'h' && u[-1] == '_';
    int sve_rows = hybrid ? d->mr % vl : 0;
    int tm = hybrid ? d->mr / vl : (d->mr + vl - 1) / vl, tn = (d->nr + vl - 1) / vl;
    double loads_a = d->pack_a_ld > 0 && wide ? groups(2 * tm) / 2 : groups(tm);
    double loads_b = d->pack_b_ld > 0 && wide ? groups(2 * tn) / 2 : groups(tn);
    double slots = tm * tn + sve_rows * tn + sve_rows + loads_a + loads_b + (wide ? 1.0 : 4.0);
    /* Ties go to fewer vectors loaded per step (KirbyMM's CMR: 32x32 loads 4, 64x16
     * 5, for the same instructions), so a plan does not mix two panel formats of
     * the same columns, each packed once. */
    slots += 1e-3 * (tm + tn + sve_rows);
    /* In the units of the model below, where one vector FMA per cycle (2 x lanes
     * flops) is the peak: both families are ranked by flops per instruction. */
    int lanes = (at_facts.simd_bytes > 0 ? at_facts.simd_bytes : 16) / elem;
    if (lanes < 1) lanes = 1;
    return peak_of(d->dtype) * (2.0 * d->mr * d->nr / slots) / (2.0 * lanes);
}

/* What a variable block's call costs beyond its K steps, in instructions: its
 * prologue, predicates and store, and above all the streaming region a plan of
 * small blocks enters for it (panel allocation, smstart and smstop, the packs).
 * Measured under QEMU at SVL 512: 4x4x4 through the 16x16 variable block cost
 * 1,720 instructions, 241 on a NEON kernel; 3x50x7 1,779 against 1,112; 13x13x13
 * 2,239 against 2,401.  Charged per call, it keeps the blocks NEON does in a few
 * hundred instructions on NEON, and costs little where the K steps dominate (a
 * 64x8 block of K = 128: about 740 instructions of steps, 56,310 on NEON for
 * 8x128x128). */
#define AT_SME2_VARIABLE_CALL_INSTR 1000.0

/* Seconds of one instruction in the SME2 model's unit (sme2_model_gflops). */
static double sme2_instr_seconds(int dtype)
{
    int elem = dtype == AT_F64 ? 8 : 4;
    int lanes = (at_facts.simd_bytes > 0 ? at_facts.simd_bytes : 16) / elem;
    if (lanes < 1) lanes = 1;
    return 2.0 * lanes / (peak_of(dtype) * 1e9);
}

/* IAAT's model when no measurement can be trusted: efficiency falls with the
 * memory operations per flop, (mr + nr) / (mr * nr), and with vector lanes left
 * idle in the contiguous dimension. */
static double model_gflops(const at_kernel *d)
{
    if (d->svl_bytes > 0) return sme2_model_gflops(d);
    int elem = d->dtype == AT_F64 ? 8 : 4;
    int lanes = (at_facts.simd_bytes > 0 ? at_facts.simd_bytes : 16) / elem;
    if (lanes < 1) lanes = 1;
    int v = d->trans_a ? (d->trans_b ? d->nr : 1) : d->mr;
    double simd = (double)v / (double)(((v + lanes - 1) / lanes) * lanes);
    /* Dot-product kernels (TN, and NN's gather variant, docs/kernels.md) fill
     * the lanes along K but pay a horizontal sum per element. */
    if ((d->trans_a && !d->trans_b) || strstr(d->name, "_gather_")) simd = 0.5;
    double area = (double)d->mr * d->nr;
    return peak_of(d->dtype) * simd * area / (area + 2.0 * (d->mr + d->nr));
}

/* Median GFLOPS interpolated linearly in log K between grid points.  Below the
 * shallowest point a call takes as long as it did there: at such depths a call
 * is its fixed cost (entry, the K loop's set-up, the stores of C), which does
 * not shrink with K.  Scaled as a constant rate instead, fp32 2x2 (10.9 ns a
 * call at K = 4) was priced at 5.4 ns for K = 2, and the edge code at 7.3 took
 * 2x2x2, which then ran at 27 ns a call; on the 2x2 kernel, 7 (2-vCPU Xeon VM). */
double at__kernel_gflops(const at_table_entry *d, int64_t K)
{
    if (at_facts.provenance == AT_PROVENANCE_MODEL || d->nk <= 0) return model_gflops(&d->kernel);
    int n = d->nk;
    if (K < 1) K = 1;
    double lk = log((double)K);
    double g;
    if (K <= d->k[0]) {
        g = d->gflops[0] * (double)K / (double)d->k[0];
    } else if (K >= d->k[n - 1]) {
        g = d->gflops[n - 1];
    } else {
        int i = 0;
        while (i + 1 < n && d->k[i + 1] < K) i++;
        double l0 = log((double)d->k[i]), l1 = log((double)d->k[i + 1]);
        double t = (lk - l0) / (l1 - l0);
        g = d->gflops[i] + t * (d->gflops[i + 1] - d->gflops[i]);
    }
    return g > 0 ? g : model_gflops(&d->kernel);
}

static double edge_fraction(int dtype)
{
    return at__weight(at__tp->edge_frac[dtype], at_params_builtin.edge_frac[dtype]);
}

static double edge_gflops(int dtype)
{
    double g = edge_fraction(dtype) * peak_of(dtype);
    return g > 0.5 ? g : 0.5;
}

/* A kernel call's time at the shallowest depth measured (0 without measurements):
 * its fixed cost, about.  The quickest of a grid's kernels is what a block of edge
 * code costs before its flops, at least: edge_frac is the edge code's rate on
 * large blocks, timed at two depths so that the calls cancel, and a call of the
 * edge code has its set-up too, which the kernels' figures include and that rate
 * leaves out, and as much again for each loop it runs (edge_loops). */
static double shallowest_call_seconds(const at_table_entry *d)
{
    if (at_facts.provenance == AT_PROVENANCE_MODEL || d->nk <= 0 || !(d->gflops[0] > 0)) return 0;
    return 2.0 * d->kernel.mr * d->kernel.nr * (double)d->k[0] / (d->gflops[0] * 1e9);
}

/* The loops edge code (edge_t.h) runs over an h x w block: 4x2 blocks, the 4-row
 * pieces of an odd last column, then each row below the blocks by 4 columns and
 * element by element.  Each loop is a sum of its own over K, with its set-up and
 * its stores, and each costs about a kernel call's fixed cost: fp64 2x2x2 (four
 * element loops) ran 43 ns on edge code and 10 on the 2x2 kernel, whose figures
 * gave the edge 6.7 ns of fixed cost and 3 of flops, so the planner took the edge
 * (Zen 1; a 1x1x1 product, 35 ns on edge code, 7 on the 1x1 kernel).  An edge_frac
 * of 1, its top, prices edge code at the peak and nothing more: that is how the
 * install's timing of the edge code (crossovers.measure_edge) and the tests put
 * every block on it. */
static int edge_loops(int h, int w)
{
    int rows4 = h / 4 * 4, cols2 = w / 2 * 2;
    return rows4 / 4 * (cols2 / 2) + (cols2 < w ? rows4 / 4 : 0) + (h - rows4) * (w / 4 + w % 4);
}

/* ---- L1 set conflicts of operands read in place ------------------------------
 * The kernel measurements read operands with small leading dimensions.  In
 * place, a kernel that walks K over an operand stored the other way round (A
 * in NN/NT, B in NT/TT) touches ceil(w * bpe / 64) lines per step, one leading
 * dimension apart.  When that stride is a multiple of a large power of two the
 * lines of the whole walk fall into a few L1 sets, every step misses and the
 * kernel runs at the speed of those misses, not of its flops: fp64 256x1x256
 * (lda = 2 KiB) ran its 8x1 kernel at 14 GFLOPS, 32 with lda = 264, whose walk
 * spreads over all sets.  Measured on Zen 5 (one thread, per line of a walk
 * spanning S sets): 1.14 ns at S = 2 (8x1), 0.77 at 4, 0.62 at 6, 0.56 at 8
 * (32x1), fitted by AT_CONFLICT_BASE + AT_CONFLICT_SET / S.  Taller kernels
 * span more sets, so the term favours them exactly where it should.  The line:
 * AT_L1_LINE (at_internal.h). */
/* 64 sets of 64-byte lines: every x86 L1D since Sandy Bridge and Zen (32-48 KiB,
 * 8-12 ways); Arm cores with 64 KiB 4-way L1s have more sets, so this errs on the
 * side of predicting conflicts they do not have only for strides that alias here. */
#define AT_L1_SETS 64
/* The fewest ways of those L1s: a walk that fits in its sets stays resident. */
#define AT_L1_WAYS 8
#define AT_CONFLICT_BASE 0.45e-9
#define AT_CONFLICT_SET 1.35e-9
#define AT_PLACE_MIN_SLICES 4

/* Seconds of a kernel call's w-wide walk over K steps ld elements apart, or 0
 * when the walk spreads over all sets or fits in the ones it uses. */
static double conflict_seconds(int64_t K, int w, int64_t ld, int bpe)
{
    int64_t bytes = ld * bpe;
    if (ld <= 0 || bytes % AT_L1_LINE) return 0;
    int64_t lines = ((int64_t)w * bpe + AT_L1_LINE - 1) / AT_L1_LINE;
    int64_t stride = (bytes / AT_L1_LINE) % AT_L1_SETS;
    int64_t sets = (AT_L1_SETS / at__gcd64(stride ? stride : AT_L1_SETS, AT_L1_SETS)) * lines;
    if (sets >= AT_L1_SETS || K * lines <= sets * AT_L1_WAYS) return 0;
    return (double)K * (double)lines * (AT_CONFLICT_BASE + AT_CONFLICT_SET / (double)sets);
}

/* The share of the lines a one-column kernel reads in place that carry its own
 * elements.  Such a kernel uses each element of its sliver of A once, so in place
 * its calls run at the speed of the lines they read, and the kernels' figures
 * (A contiguous, in L1) do not show it: a sliver that is no whole number of lines
 * shares a line with each neighbour, and both read it.  fp64 256x1x256 ran in
 * 18.5 us on 14x1 kernels and in 13.2 on 48x1 (Zen 1), 1.6 ns a line read either
 * way, though 14x1's figures were the best by 3 %.  A sliver of whole lines is
 * taken to start on one (64-byte aligned operands, a leading dimension of whole
 * lines); another one touches (bytes + 64 - element) / 64 lines a step on average. */
static double sliver_line_share(int mr, int bpe)
{
    int bytes = mr * bpe;
    if (bytes % AT_L1_LINE == 0) return 1.0;
    double whole = (double)((bytes + AT_L1_LINE - 1) / AT_L1_LINE);
    return whole / ((double)(bytes + AT_L1_LINE - bpe) / AT_L1_LINE);
}

/* The depth a no-pack step walks at a time (0: all of K).  A step reads its sliver
 * of A in place, mr elements a column, lda apart.  Operands from malloc and numpy
 * start 16 bytes past a line (glibc's large blocks are a page plus a 16-byte
 * header), and a leading dimension of no whole number of lines moves every column,
 * so a sliver shares a line with the one above and the one below.  A step's walk
 * over all of K evicts the lines its neighbour shares, and where the walk falls
 * into a few L1 sets (a stride of a power of two lines) or takes a page a column,
 * much more: the neighbour reads them again.  Walking K in slices, every step in
 * turn per slice, it finds them in L1 when one step's slice fits the sets its walk
 * falls in (conflict_seconds' count, the shared line included).
 *
 * Zen 1, one thread, a few columns of C (plan.c, slice_place_walks), against all
 * of K, with A 16 bytes past a line: f32 1024x1x1024 (96x1 steps a page apart, slices
 * of 8) 1.57x, 4096x1x4096 3.8x, 256x1x256 (32x1, 1 KiB apart, 32) 1.34x,
 * 1024x4x1024 (24x4, 32) 1.48-1.56x, 300x4x2000 (1200 bytes apart, 168) 1.30x;
 * fp64 512x4x512 1.36x, 300x4x2000 1.60x, 250x3x3000 1.81x.
 * On 64-byte aligned operands 0.88-2.5x (fp64 300x5x2000 0.88x, 100x8x1000 0.96x).
 * Fewer steps a slice lost: fp64 512x4x512 ran 0.9x aligned in slices of 8 (C's
 * block read and written once a slice). */
int64_t at__place_k_slice(int64_t K, int mr, int nr, int64_t lda, int bpe, int from_memory)
{
    /* An A from memory is read by as many concurrent streams as a slice has
     * columns, and the hardware prefetchers follow a dozen or two: past them every
     * line is a miss to DRAM.  Zen 1 (8 MiB L3), fp64, the 12x4 kernel in this
     * walk, one thread, GFLOPS in slices of 8 / 32 / all of K: 1024x4x1024 (A 8 MB)
     * 9.8 / 5.1 / 5.8, 1500x4x1500 10.5 / 4.9 / 4.4, 996x4x2000 10.1 / 6.3 / 4.5,
     * at any stride.  Software prefetch did not rescue the deeper slices (32: 5.2
     * at best).  Past 4 columns, C's traffic a slice takes 16: 1500x8x1500 12.0
     * in 8, 12.4 in 16; 1500x16x1500 12.8 and 13.5 (8 at N = 4: 10.5, 16: 8.8).
     * Past 16, 128 bytes of each row of A: f32 1500 x N x 1500, N = 20, 32, 48, in
     * 16 / 32: 25.7 / 28.6, 24.9 / 28.6, 27.0 / 30.0; fp64 in 16 / 32: 13.2 / 11.6,
     * 13.0 / 12.0. */
    if (from_memory) {
        int64_t slice = nr > 16 ? 128 / bpe : AT_PLACE_SLICE_STEP * (nr > 4 ? 2 : 1);
        return K >= AT_PLACE_MIN_SLICES * slice ? slice : 0;
    }
    int64_t lines = ((int64_t)mr * bpe + AT_L1_LINE - 1) / AT_L1_LINE + 1; /* one shared */
    int64_t bytes = lda * bpe, sets = AT_L1_SETS;
    if (lda > 0 && bytes % AT_L1_LINE == 0) {
        int64_t stride = (bytes / AT_L1_LINE) % AT_L1_SETS;
        sets = (AT_L1_SETS / at__gcd64(stride ? stride : AT_L1_SETS, AT_L1_SETS)) * lines;
        if (sets > AT_L1_SETS) sets = AT_L1_SETS;
    }
    int64_t slice = sets * AT_L1_WAYS / lines / AT_PLACE_SLICE_STEP * AT_PLACE_SLICE_STEP;
    /* Each slice reads and writes C once: AT_PLACE_SLICE_STEP steps of K per column
     * of C keep that a fixed share of the loads, which pays while A is cached (Zen 1,
     * fp64, 12x4 steps, one thread, GFLOPS in slices of 8 / of 32: 512x4x512, A of
     * 2 MB, 9.5 / 16.1) and costs once A streams (above). */
    if (slice < AT_PLACE_SLICE_STEP * nr) slice = AT_PLACE_SLICE_STEP * nr;
    /* A walk of a few slices evicts little of what its neighbour shares, and its
     * extra calls and C's traffic cost more: fp64 64x3x128 (12-row steps, 512 bytes
     * apart) ran 0.91-0.95x in two slices of 64. */
    return K >= AT_PLACE_MIN_SLICES * slice ? slice : 0;
}

/* ---- the cost grid: the best way to compute an h x w block ------------------ */

void at__grid_free(at_grid *g)
{
    free(g->kid);
    free(g->sec);
}

/* lda and ldb are those of operands read in place (0 for packed panels, whose
 * layout the measurements already reflect). */
int at__grid_build(at_grid *g, int dtype, int ta, int tb, int64_t K, int64_t lda,
                   int64_t ldb, int favour)
{
    int H = 0, W = 0;
    double fastest = 0, entry = 0;
    for (int i = 0; i < at_kernel_table_count; i++) {
        const at_kernel *d = at__kernel_for(i, dtype, ta, tb);
        if (!d) continue;
        if (d->mr > H) H = d->mr;
        if (d->nr > W) W = d->nr;
        double t = shallowest_call_seconds(&at_kernel_table[i]);
        if (t > 0 && (entry == 0 || t < entry)) entry = t;
        /* (Only with a favoured kernel: most plans have none.) */
        if (favour >= 0) {
            double r = at__kernel_gflops(&at_kernel_table[i], K);
            if (r > fastest) fastest = r;
        }
    }
    if (H < AT_GRID_MIN) H = AT_GRID_MIN;
    if (W < AT_GRID_MIN) W = AT_GRID_MIN;
    g->H = H;
    g->W = W;
    g->kid = malloc(sizeof *g->kid * (size_t)H * (size_t)W);
    g->sec = malloc(sizeof *g->sec * (size_t)H * (size_t)W);
    if (!g->kid || !g->sec) {
        at__grid_free(g);
        return AT_ENOMEM;
    }
    double eg = edge_gflops(dtype), call = call_seconds(dtype);
    double per_loop = edge_fraction(dtype) >= 1 ? 0 : entry;
    for (int h = 1; h <= H; h++)
        for (int w = 1; w <= W; w++) {
            size_t c = (size_t)(h - 1) * W + (w - 1);
            g->kid[c] = AT_EDGE;
            g->sec[c] = 2.0 * h * w * (double)K / (eg * 1e9) + entry + per_loop * edge_loops(h, w) + call;
        }
    /* Fixed blocks first, so on a tie a block keeps its own kernel; then each
     * variable block offers its cost to every block it can compute. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < at_kernel_table_count; i++) {
            const at_kernel *d = at__kernel_for(i, dtype, ta, tb);
            if (!d || sme2_variable(d) != pass) continue;
            /* The favoured kernel at the family's best speed, a hair over: on a tie
             * of cost per flop its blocks win, so it covers the blocks' interiors. */
            double rate = i == favour ? fastest * (1 + 1e-9) : at__kernel_gflops(&at_kernel_table[i], K);
            int bpe = dtype == AT_F64 ? 8 : 4;
            if (!ta && lda > 0 && d->nr == 1) rate *= sliver_line_share(d->mr, bpe);
            double s = 2.0 * d->mr * d->nr * (double)K / (rate * 1e9);
            /* A walk missing L1 every step bounds the call; flops and misses overlap. */
            double miss = (ta ? 0 : conflict_seconds(K, d->mr, lda, bpe)) +
                          (tb ? conflict_seconds(K, d->nr, ldb, bpe) : 0);
            s = (s > miss ? s : miss) + call;
            if (pass) s += AT_SME2_VARIABLE_CALL_INSTR * sme2_instr_seconds(dtype);
            for (int h = pass ? 1 : d->mr; h <= d->mr; h++)
                for (int w = pass ? 1 : d->nr; w <= d->nr; w++) {
                    size_t c = (size_t)(h - 1) * W + (w - 1);
                    if (s < g->sec[c]) {
                        g->sec[c] = s;
                        g->kid[c] = i;
                    }
                }
        }
    return AT_OK;
}

