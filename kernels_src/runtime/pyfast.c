/* pyfast.c: the _atfast extension, the Python hot path of autotune.gemm.
 *
 * One METH_FASTCALL call takes the numpy arrays themselves, reads their
 * buffers, derives layout, transpositions and leading dimensions, and runs the
 * cached plan: no pointer or attribute is fetched in Python.  Anything outside
 * the fast path (another dtype, mixed dtypes, no unit stride, not 2-D, a
 * read-only C) is handed to the Python slow path registered by _init, which
 * copies, falls back to numpy or raises the clear error.
 *
 * gemm_batch does the same for 3-D stacks (a 2-D operand shared by every item):
 * one plan lookup and one at_gemm_batch_strided call with the item strides;
 * lists, mixed dtypes, items with no unit stride and every error go to the
 * Python batch slow path (api._batch_slow_path).
 *
 * _qmatmul is qmatmul's call into at_qmatmul_f32 once autotune.runtime.qapi has
 * checked the operands: through ctypes the call and its pointers cost 3 us, a tenth
 * of a 1 x 4000 x 1000 product.  matmul is autotune.matmul itself: a product of two
 * float matrices goes to gemm, every other call to the Python implementation
 * (api.matmul) registered by _init.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "autotune.h"

static PyObject *np_empty, *np_dtype[2], *slow_path, *batch_slow_path, *matmul_slow_path, *np_ndarray;

/* The library's entry points, given by _init from the ctypes handle the loader
 * opened.  The extension does not link against libautotune: the dynamic linker
 * would bind it to whichever libautotune.so (same soname) was loaded first, so
 * a second library in the process would run the first one's kernels and plan
 * cache.  Through these pointers each extension reaches its own copy. */
static int (*lib_gemm)(int, int, int, int, int64_t, int64_t, int64_t, double, const void *,
                       int64_t, const void *, int64_t, double, void *, int64_t);
static int (*lib_gemm_batch)(int, int, int, int, int64_t, int64_t, int64_t, double, const void *,
                             int64_t, int64_t, const void *, int64_t, int64_t, double, void *,
                             int64_t, int64_t, int64_t);
static const char *(*lib_last_error)(void);
static int (*lib_qmatmul)(int64_t, const float *, int64_t, const void *, const float *, const float *, float *,
                          int64_t);

/* What _init expects; the loader refuses an extension built for another. */
#define AT_FAST_ABI 4

/* Releasing the GIL costs more than a tiny product takes. */
#define AT_NOGIL_FLOPS 2.0e5

typedef struct {
    int dtype;        /* AT_F32 / AT_F64 */
    int64_t rows, cols;
    int col_ok, row_ok;  /* can be read as column-major / row-major */
    int64_t ld_col, ld_row;
} at_view;

/* The dtype of a buffer's format: AT_F32 / AT_F64, -1 for anything else. */
static int buf_dtype(const Py_buffer *v)
{
    if (!v->format) return -1;
    const char *f = v->format;
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[0] == 'f' && f[1] == 0 && v->itemsize == 4) return AT_F32;
    if (f[0] == 'd' && f[1] == 0 && v->itemsize == 8) return AT_F64;
    return -1;
}

/* 0: an r x c matrix with byte strides s0, s1 can be read with one unit
 * stride (its orientations in o); -1: it cannot. */
static int classify_item(int64_t r, int64_t c, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t itemsize,
                         at_view *o)
{
    if (s0 % itemsize || s1 % itemsize) return -1;
    int64_t sr = s0 / itemsize, sc = s1 / itemsize;
    o->rows = r;
    o->cols = c;
    int64_t mr = r > 1 ? r : 1, mc = c > 1 ? c : 1;
    if (r == 0 || c == 0) {
        o->col_ok = o->row_ok = 1;
        o->ld_col = mr;
        o->ld_row = mc;
        return 0;
    }
    o->col_ok = (sr == 1 || r == 1) && (c == 1 || sc >= mr);
    o->ld_col = c == 1 ? mr : sc;
    o->row_ok = (sc == 1 || c == 1) && (r == 1 || sr >= mc);
    o->ld_row = r == 1 ? mc : sr;
    return o->col_ok || o->row_ok ? 0 : -1;
}

/* 0: a 2-D float32/float64 buffer with one unit stride; -1: slow path. */
static int classify(const Py_buffer *v, at_view *o)
{
    if (v->ndim != 2 || (o->dtype = buf_dtype(v)) < 0) return -1;
    int64_t r = v->shape[0], c = v->shape[1];
    Py_ssize_t s0 = v->strides ? v->strides[0] : c * v->itemsize;
    Py_ssize_t s1 = v->strides ? v->strides[1] : v->itemsize;
    return classify_item(r, c, s0, s1, v->itemsize, o);
}

/* The bytes [lo, hi) a buffer's elements can touch: numpy's may_share_memory
 * bound.  An empty buffer touches nothing (lo == hi). */
static void extent(const Py_buffer *v, int from_dim, const char **lo, const char **hi)
{
    const char *l = v->buf, *h = v->buf;
    for (int i = from_dim; i < v->ndim; i++) {
        if (v->shape[i] == 0) {
            *lo = *hi = v->buf;
            return;
        }
        Py_ssize_t span = (v->shape[i] - 1) * v->strides[i];
        if (span < 0) l += span; else h += span;
    }
    *lo = l;
    *hi = h + v->itemsize;
}

/* C overlapping an operand would be read after it was written (gemm(A, B, B) or
 * gemm(A, A, A)): such calls go to the slow path, which copies the operand and
 * gives numpy's answer.  Bounds only: rarely a false alarm, never a miss. */
static int overlaps(const Py_buffer *x, const Py_buffer *y)
{
    const char *xl, *xh, *yl, *yh;
    extent(x, 0, &xl, &xh);
    extent(y, 0, &yl, &yh);
    return xl < yh && yl < xh;
}

/* The flag and leading dimension of an operand read in `layout`. */
static void orient(const at_view *v, int layout, int *trans, int64_t *ld)
{
    int same = layout == AT_COL_MAJOR ? v->col_ok : v->row_ok;
    if (same) {
        *ld = layout == AT_COL_MAJOR ? v->ld_col : v->ld_row;
    } else {
        /* Stored the other way round: it is its own transpose in this layout. */
        *trans = !*trans;
        *ld = layout == AT_COL_MAJOR ? v->ld_row : v->ld_col;
    }
}

static PyObject *call_slow(PyObject *A, PyObject *B, PyObject *C, double alpha, double beta,
                           int ta, int tb)
{
    if (!slow_path) {
        PyErr_SetString(PyExc_RuntimeError, "_atfast is not initialised");
        return NULL;
    }
    return PyObject_CallFunction(slow_path, "OOOddii", A, B, C ? C : Py_None, alpha, beta, ta, tb);
}

static const char *kw_names[] = {"C", "alpha", "beta", "trans_a", "trans_b"};

PyDoc_STRVAR(gemm_doc,
             "gemm(A, B, C=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False)\n--\n\n"
             "C = alpha * op(A) @ op(B) + beta * C through libautotune's cached plan.");

/* The arguments of gemm and gemm_batch: (A, B, C=None, *, alpha, beta,
 * trans_a, trans_b); C is left NULL when absent or None.  -1 with an error set. */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      PyObject **A, PyObject **B, PyObject **C, double *alpha, double *beta,
                      int *ta, int *tb)
{
    PyObject *opt[5] = {NULL, NULL, NULL, NULL, NULL};
    if (nargs < 2 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes A, B and an optional C", fn);
        return -1;
    }
    *A = args[0];
    *B = args[1];
    if (nargs == 3) opt[0] = args[2];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int k;
        for (k = 0; k < 5; k++)
            if (PyUnicode_CompareWithASCIIString(name, kw_names[k]) == 0) break;
        if (k == 5 || opt[k]) {
            PyErr_Format(PyExc_TypeError, "%s() got %s keyword argument '%U'", fn,
                         k == 5 ? "an unexpected" : "a repeated", name);
            return -1;
        }
        opt[k] = args[nargs + i];
    }
    *C = opt[0] && opt[0] != Py_None ? opt[0] : NULL;
    *alpha = 1.0;
    *beta = 0.0;
    if (opt[1] && (*alpha = PyFloat_AsDouble(opt[1])) == -1.0 && PyErr_Occurred()) return -1;
    if (opt[2] && (*beta = PyFloat_AsDouble(opt[2])) == -1.0 && PyErr_Occurred()) return -1;
    *ta = *tb = 0;
    if (opt[3] && (*ta = PyObject_IsTrue(opt[3])) < 0) return -1;
    if (opt[4] && (*tb = PyObject_IsTrue(opt[4])) < 0) return -1;
    return 0;
}

/* A float32 or float64 matrix: what numpy.matmul computes as one gemm (read-only
 * unless the buffer is C, which `writable` asks for). */
static int float_matrix(const Py_buffer *v, int writable)
{
    return v->ndim == 2 && buf_dtype(v) >= 0 && (!writable || !v->readonly);
}

/* gemm(A, B, C, alpha, beta, ta, tb) on the arguments' buffers, read once.  With
 * `declined` (autotune.matmul's product of two matrices), operands numpy.matmul
 * treats otherwise (not exact ndarrays, not one float dtype, not 2-D, shapes that
 * do not chain, a C that is read-only or of another shape) are left alone: NULL, no
 * error set, *declined = 1, for the caller's own slow path. */
static PyObject *run_gemm(PyObject *A, PyObject *B, PyObject *C, double alpha, double beta, int ta, int tb,
                          int *declined)
{
    Py_buffer va, vb, vc;
    at_view a, b, c;
    if (!lib_gemm) return call_slow(A, B, C, alpha, beta, ta, tb);
    if (PyObject_GetBuffer(A, &va, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        if (declined) return *declined = 1, NULL;
        return call_slow(A, B, C, alpha, beta, ta, tb);
    }
    if (PyObject_GetBuffer(B, &vb, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&va);
        if (declined) return *declined = 1, NULL;
        return call_slow(A, B, C, alpha, beta, ta, tb);
    }
    if (declined && (!float_matrix(&va, 0) || !float_matrix(&vb, 0) || buf_dtype(&va) != buf_dtype(&vb) ||
                     va.shape[1] != vb.shape[0])) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return *declined = 1, NULL;
    }
    if (classify(&va, &a) || classify(&vb, &b) || a.dtype != b.dtype) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return call_slow(A, B, C, alpha, beta, ta, tb);
    }
    int64_t M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols;
    int64_t Kb = tb ? b.cols : b.rows, N = tb ? b.rows : b.cols;
    if (K != Kb) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        PyErr_Format(PyExc_ValueError,
                     "gemm: inner dimensions differ: op(A) is %lld x %lld, op(B) is %lld x %lld",
                     (long long)M, (long long)K, (long long)Kb, (long long)N);
        return NULL;
    }
    PyObject *out;
    if (C) {
        out = C;
        Py_INCREF(out);
    } else {
        PyObject *shape = Py_BuildValue("(LL)", (long long)M, (long long)N);
        out = shape ? PyObject_CallFunctionObjArgs(np_empty, shape, np_dtype[a.dtype], NULL) : NULL;
        Py_XDECREF(shape);
        if (!out) {
            PyBuffer_Release(&va);
            PyBuffer_Release(&vb);
            return NULL;
        }
    }
    /* Without PyBUF_WRITABLE, so that autotune.matmul can decline a read-only C. */
    if (PyObject_GetBuffer(out, &vc, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        Py_DECREF(out);
        if (declined) return *declined = 1, NULL;
        return call_slow(A, B, C, alpha, beta, ta, tb);
    }
    if (declined && C && (!float_matrix(&vc, 1) || buf_dtype(&vc) != a.dtype || vc.shape[0] != M ||
                          vc.shape[1] != N)) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        PyBuffer_Release(&vc);
        Py_DECREF(out);
        return *declined = 1, NULL;
    }
    if (vc.readonly || classify(&vc, &c) || c.dtype != a.dtype ||
        (C && (overlaps(&vc, &va) || overlaps(&vc, &vb)))) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        PyBuffer_Release(&vc);
        Py_DECREF(out);
        return call_slow(A, B, C, alpha, beta, ta, tb);
    }
    if (c.rows != M || c.cols != N) {
        PyErr_Format(PyExc_ValueError, "gemm: C is %lld x %lld but op(A) @ op(B) is %lld x %lld",
                     (long long)c.rows, (long long)c.cols, (long long)M, (long long)N);
        goto fail;
    }
    int layout = c.row_ok ? AT_ROW_MAJOR : AT_COL_MAJOR;
    int64_t lda, ldb, ldc = layout == AT_ROW_MAJOR ? c.ld_row : c.ld_col;
    orient(&a, layout, &ta, &lda);
    orient(&b, layout, &tb, &ldb);
    int rc;
    if (2.0 * (double)M * (double)N * (double)K > AT_NOGIL_FLOPS) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_gemm(a.dtype, layout, ta, tb, M, N, K, alpha, va.buf, lda, vb.buf, ldb, beta,
                     vc.buf, ldc);
        Py_END_ALLOW_THREADS
    } else {
        rc = lib_gemm(a.dtype, layout, ta, tb, M, N, K, alpha, va.buf, lda, vb.buf, ldb, beta,
                     vc.buf, ldc);
    }
    if (rc == AT_ENOMEM) {
        PyErr_NoMemory();
        goto fail;
    }
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "libautotune: %s", lib_last_error());
        goto fail;
    }
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    return out;
fail:
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    Py_DECREF(out);
    return NULL;
}

static PyObject *at_py_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    (void)self;
    PyObject *A, *B, *C;
    double alpha, beta;
    int ta, tb;
    if (parse_args("gemm", args, nargs, kwnames, &A, &B, &C, &alpha, &beta, &ta, &tb) < 0)
        return NULL;
    if (!C && beta != 0.0) {
        PyErr_SetString(PyExc_ValueError, "gemm: beta needs an output C to scale");
        return NULL;
    }
    return run_gemm(A, B, C, alpha, beta, ta, tb, NULL);
}

PyDoc_STRVAR(matmul_doc,
             "matmul(a, b, out=None)\n--\n\n"
             "numpy.matmul computed by libautotune (autotune.runtime.api.matmul documents it).\n"
             "Two float32 or two float64 matrices (out None, or a writable matrix of their dtype and\n"
             "the product's shape) are one gemm call here; every other call is api.matmul's.");

/* autotune.matmul itself, so that its common case costs what gemm's does: behind a
 * Python function that tried a C product first, an 8x8 product took 0.68 us against
 * gemm's 0.47, and as a C entry that checked the operands before gemm read them
 * again 0.56; sharing gemm's one reading of the buffers (run_gemm), 0.49 like
 * gemm (the general checks in Python cost 2.8 us).  Exact ndarrays only: a
 * subclass (np.matrix) keeps numpy's wrapping, which the Python path reproduces. */
static PyObject *at_py_matmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *C = NULL;
    if (nargs == 3 && nkw == 0)
        C = args[2];
    else if (nargs == 2 && nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") == 0)
        C = args[2];
    else if (nargs != 2 || nkw != 0)
        goto slow;
    if (C == Py_None) C = NULL;
    PyTypeObject *nd = (PyTypeObject *)np_ndarray;
    if (nd && Py_TYPE(args[0]) == nd && Py_TYPE(args[1]) == nd && (!C || Py_TYPE(C) == nd)) {
        int declined = 0;
        PyObject *product = run_gemm(args[0], args[1], C, 1.0, 0.0, 0, 0, &declined);
        if (!declined) return product;
    }
slow:
    if (!matmul_slow_path) {
        PyErr_SetString(PyExc_RuntimeError, "_atfast.matmul: _init has not been called");
        return NULL;
    }
    return PyObject_Vectorcall(matmul_slow_path, args, (size_t)nargs, kwnames);
}

/* One operand of a batch: a 3-D stack of `batch` items (batch stride in
 * elements, never negative) or a 2-D matrix shared by every item (stride 0).
 * 0 when each item has a unit stride; -1 sends the call to the slow path. */
static int batch_item(const Py_buffer *v, int64_t batch, at_view *o, int64_t *stride)
{
    if (!v->strides || (o->dtype = buf_dtype(v)) < 0) return -1;
    if (v->ndim == 2) {
        *stride = 0;
        return classify_item(v->shape[0], v->shape[1], v->strides[0], v->strides[1], v->itemsize,
                             o);
    }
    if (v->ndim != 3 || v->shape[0] != batch || v->strides[0] < 0 ||
        v->strides[0] % v->itemsize)
        return -1;
    *stride = v->strides[0] / v->itemsize;
    return classify_item(v->shape[1], v->shape[2], v->strides[1], v->strides[2], v->itemsize, o);
}

/* Column-major first, as api._orient does, so that this entry and the Python
 * path pick the same plan and give bitwise the same results. */
static void batch_orient(const at_view *v, int c_col, int *trans, int64_t *ld)
{
    int col = v->col_ok;
    *ld = col ? v->ld_col : v->ld_row;
    if (col != c_col) *trans = !*trans;
}

PyDoc_STRVAR(gemm_batch_doc,
             "gemm_batch(A, B, C=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False)\n--\n\n"
             "C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] over 3-D stacks (a 2-D operand\n"
             "is shared by every item) in one call of libautotune's batched plan.");

static PyObject *at_py_gemm_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)self;
    PyObject *A, *B, *C = NULL;
    double alpha, beta;
    int ta, tb;
    if (parse_args("gemm_batch", args, nargs, kwnames, &A, &B, &C, &alpha, &beta, &ta, &tb) < 0)
        return NULL;
    const int ta0 = ta, tb0 = tb;
    Py_buffer vb[3];
    int held = 0;  /* buffers of vb[] acquired so far */
    at_view v[3];
    int64_t stride[3];
    PyObject *out = NULL;
    PyObject *ops[2] = {A, B};
    if (!lib_gemm_batch) goto slow;
    for (; held < 2; held++) {
        if (PyObject_GetBuffer(ops[held], &vb[held], PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            goto slow;
        }
    }
    /* Lists, a 4-D operand, two 2-D ones: the slow path handles or rejects them. */
    if (vb[0].ndim < 2 || vb[0].ndim > 3 || vb[1].ndim < 2 || vb[1].ndim > 3 ||
        (vb[0].ndim != 3 && vb[1].ndim != 3))
        goto slow;
    int64_t batch = vb[0].ndim == 3 ? vb[0].shape[0] : vb[1].shape[0];
    if (batch_item(&vb[0], batch, &v[0], &stride[0]) ||
        batch_item(&vb[1], batch, &v[1], &stride[1]) || v[0].dtype != v[1].dtype)
        goto slow;
    int64_t M = ta ? v[0].cols : v[0].rows, K = ta ? v[0].rows : v[0].cols;
    int64_t Kb = tb ? v[1].cols : v[1].rows, N = tb ? v[1].rows : v[1].cols;
    if (K != Kb) goto slow; /* the slow path raises the clear error */
    if (C) {
        /* Only an ndarray is updated in place, as the Python path requires. */
        if (!np_ndarray || !PyObject_TypeCheck(C, (PyTypeObject *)np_ndarray)) goto slow;
        out = C;
        Py_INCREF(out);
    } else {
        if (beta != 0.0) goto slow;
        out = Py_BuildValue("(LLL)", (long long)batch, (long long)M, (long long)N);
        if (out)
            Py_SETREF(out, PyObject_CallFunctionObjArgs(np_empty, out, np_dtype[v[0].dtype], NULL));
        if (!out) goto fail;
    }
    if (PyObject_GetBuffer(out, &vb[2], PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        goto slow;
    }
    held = 3;
    /* C must not overlap A or B (the slow path copies such an operand).  Items
     * of C may overlap one another: the library runs them in item order. */
    if (vb[2].ndim != 3 || vb[2].shape[0] != batch ||
        batch_item(&vb[2], batch, &v[2], &stride[2]) || v[2].dtype != v[0].dtype ||
        v[2].rows != M || v[2].cols != N)
        goto slow;
    if (C && (overlaps(&vb[2], &vb[0]) || overlaps(&vb[2], &vb[1]))) goto slow;
    int c_col = v[2].col_ok;
    int layout = c_col ? AT_COL_MAJOR : AT_ROW_MAJOR;
    int64_t lda, ldb, ldc = c_col ? v[2].ld_col : v[2].ld_row;
    batch_orient(&v[0], c_col, &ta, &lda);
    batch_orient(&v[1], c_col, &tb, &ldb);
    int rc;
    if (2.0 * (double)M * (double)N * (double)K * (double)batch > AT_NOGIL_FLOPS) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_gemm_batch(v[0].dtype, layout, ta, tb, M, N, K, alpha, vb[0].buf, lda,
                                   stride[0], vb[1].buf, ldb, stride[1], beta, vb[2].buf, ldc,
                                   stride[2], batch);
        Py_END_ALLOW_THREADS
    } else {
        rc = lib_gemm_batch(v[0].dtype, layout, ta, tb, M, N, K, alpha, vb[0].buf, lda,
                                   stride[0], vb[1].buf, ldb, stride[1], beta, vb[2].buf, ldc,
                                   stride[2], batch);
    }
    if (rc == AT_ENOMEM) {
        PyErr_SetString(PyExc_MemoryError, lib_last_error());
        goto fail;
    }
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "libautotune: %s", lib_last_error());
        goto fail;
    }
    for (int i = 0; i < held; i++) PyBuffer_Release(&vb[i]);
    return out;
slow:
    for (int i = 0; i < held; i++) PyBuffer_Release(&vb[i]);
    Py_XDECREF(out);
    if (!batch_slow_path) {
        PyErr_SetString(PyExc_RuntimeError, "_atfast is not initialised");
        return NULL;
    }
    return PyObject_CallFunction(batch_slow_path, "OOOddii", A, B, C ? C : Py_None, alpha, beta,
                                 ta0, tb0);
fail:
    for (int i = 0; i < held; i++) PyBuffer_Release(&vb[i]);
    Py_XDECREF(out);
    return NULL;
}

/* A float32 vector of `n` values (bias, clamp) as a contiguous buffer, or None (*held = 0). */
static int float_vector(PyObject *x, int64_t n, Py_buffer *v, int *held, const char *what)
{
    *held = 0;
    if (x == Py_None) return 0;
    if (PyObject_GetBuffer(x, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    *held = 1;
    if (buf_dtype(v) != AT_F32 || v->ndim != 1 || v->shape[0] != n) {
        PyErr_Format(PyExc_ValueError, "_qmatmul: %s must be %lld contiguous float32 values", what, (long long)n);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(qmatmul_doc,
             "_qmatmul(A, weights, n, bias, clamp)\n--\n\n"
             "C = A x W through at_qmatmul_f32: A a C-contiguous float32 matrix, weights the address\n"
             "of an at_qweights of n columns, bias (n values) and clamp (2) float32 vectors or None.\n"
             "Returns C, or the library's nonzero status (at_last_error says why).");

static PyObject *at_py_qmatmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_qmatmul(A, weights, n, bias, clamp)");
        return NULL;
    }
    if (!lib_qmatmul) {
        PyErr_SetString(PyExc_RuntimeError, "_atfast is not initialised");
        return NULL;
    }
    const void *weights = PyLong_AsVoidPtr(args[1]);
    const long long n = PyLong_AsLongLong(args[2]);
    if ((!weights || n < 0) && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "_qmatmul: no weights, or a negative n");
    if (PyErr_Occurred()) return NULL;
    Py_buffer va, vb, vl, vc;
    int held_b = 0, held_l = 0, held_c = 0, rc = 0;
    PyObject *out = NULL;
    if (PyObject_GetBuffer(args[0], &va, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (buf_dtype(&va) != AT_F32 || va.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "_qmatmul: A must be a C-contiguous float32 matrix");
        goto done;
    }
    if (float_vector(args[3], n, &vb, &held_b, "bias") < 0 || float_vector(args[4], 2, &vl, &held_l, "clamp") < 0)
        goto done;
    const int64_t M = va.shape[0], K = va.shape[1];
    PyObject *shape = Py_BuildValue("(LL)", (long long)M, n);
    out = shape ? PyObject_CallFunctionObjArgs(np_empty, shape, np_dtype[AT_F32], NULL) : NULL;
    Py_XDECREF(shape);
    if (!out || PyObject_GetBuffer(out, &vc, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        Py_CLEAR(out);
        goto done;
    }
    held_c = 1;
    const float *bias = held_b ? vb.buf : NULL, *clamp = held_l ? vl.buf : NULL;
    if (2.0 * (double)M * (double)K * (double)n > AT_NOGIL_FLOPS) {
        Py_BEGIN_ALLOW_THREADS
        rc = lib_qmatmul(M, va.buf, K, weights, bias, clamp, vc.buf, n);
        Py_END_ALLOW_THREADS
    } else {
        rc = lib_qmatmul(M, va.buf, K, weights, bias, clamp, vc.buf, n);
    }
    if (rc) Py_SETREF(out, PyLong_FromLong(rc));
done:
    PyBuffer_Release(&va);
    if (held_b) PyBuffer_Release(&vb);
    if (held_l) PyBuffer_Release(&vl);
    if (held_c) PyBuffer_Release(&vc);
    return out;
}

static PyObject *at_py_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 11 || !PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "_init(empty, float32, float64, slow_path, batch_slow_path, matmul_slow_path, "
                        "ndarray, at_gemm, at_gemm_batch_strided, at_last_error, at_qmatmul_f32)");
        return NULL;
    }
    void *entry[4];
    for (int i = 0; i < 4; i++) {
        entry[i] = PyLong_AsVoidPtr(args[7 + i]);
        if (!entry[i]) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "_init: a library entry point is NULL");
            return NULL;
        }
    }
    PyObject **slots[7] = {&np_empty,       &np_dtype[0],      &np_dtype[1], &slow_path,
                           &batch_slow_path, &matmul_slow_path, &np_ndarray};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    lib_gemm = (int (*)(int, int, int, int, int64_t, int64_t, int64_t, double, const void *,
                        int64_t, const void *, int64_t, double, void *, int64_t))entry[0];
    lib_gemm_batch = (int (*)(int, int, int, int, int64_t, int64_t, int64_t, double, const void *,
                              int64_t, int64_t, const void *, int64_t, int64_t, double, void *,
                              int64_t, int64_t, int64_t))entry[1];
    lib_last_error = (const char *(*)(void))entry[2];
    lib_qmatmul = (int (*)(int64_t, const float *, int64_t, const void *, const float *, const float *, float *,
                           int64_t))entry[3];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"gemm", (PyCFunction)(void (*)(void))at_py_gemm, METH_FASTCALL | METH_KEYWORDS, gemm_doc},
    {"gemm_batch", (PyCFunction)(void (*)(void))at_py_gemm_batch, METH_FASTCALL | METH_KEYWORDS,
     gemm_batch_doc},
    {"_qmatmul", (PyCFunction)(void (*)(void))at_py_qmatmul, METH_FASTCALL, qmatmul_doc},
    {"matmul", (PyCFunction)(void (*)(void))at_py_matmul, METH_FASTCALL | METH_KEYWORDS, matmul_doc},
    {"_init", (PyCFunction)(void (*)(void))at_py_init, METH_FASTCALL,
     "Register numpy.empty, the two dtypes, the three slow paths, numpy.ndarray and the library's\n"
     "at_gemm, at_gemm_batch_strided, at_last_error and at_qmatmul_f32 (addresses)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_atfast", "The Python hot path of libautotune.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__atfast(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "ABI", AT_FAST_ABI) < 0) Py_CLEAR(m);
    return m;
}
