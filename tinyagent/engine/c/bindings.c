/* Python's entry points to matmul.c, kvcache.c, gelu.c, adam.c and softmax.c: the module
   tinyagent.engine._kernels.

   A run calls the matrix kernel about 1,000 times a step, most often on one token's products,
   which take a few microseconds. Through ctypes, which converts tiny_bmm's 19 arguments one by
   one, a call of a 1 x 1 x 1 product took 2.2 µs; here each argument is read as a Python int (a
   tensor's address is an int, None a null one) or float, and the call takes 0.16 µs. The
   kernels themselves stay plain C. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernels.h"

/* Reads `nargs` arguments as the format says, one letter each: 'i' an int or an address (None
   is 0), 'f' a float. Returns 0, or -1 with Python's error set. */
static int read_args(const char *name, const char *format, PyObject *const *args,
                     Py_ssize_t nargs, Py_ssize_t *ints, double *floats)
{
    Py_ssize_t expected = (Py_ssize_t)strlen(format);
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", name, expected, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (format[i] == 'f') {
            floats[i] = PyFloat_AsDouble(args[i]);
            if (floats[i] == -1.0 && PyErr_Occurred()) return -1;
        } else {
            ints[i] = args[i] == Py_None ? 0 : PyLong_AsSsize_t(args[i]);
            if (ints[i] == -1 && PyErr_Occurred()) return -1;
        }
    }
    return 0;
}

#define F(i) ((float *)v[i])
#define CF(i) ((const float *)v[i])

/* bmm(nb1, nb2, M, N, K, A, sa1, sa2, sam, sak, B, sb1, sb2, sbk, sbn, C, scale, causal, bias) */
static PyObject *bmm(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t v[19];
    double d[19];
    if (read_args("bmm", "iiiiiiiiiiiiiiiifii", args, nargs, v, d)) return NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tiny_bmm((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], CF(5), v[6], v[7],
                      v[8], v[9], CF(10), v[11], v[12], v[13], v[14], F(15), (float)d[16],
                      (int)v[17], CF(18));
    Py_END_ALLOW_THREADS
    if (status)
        return PyErr_Format(PyExc_MemoryError, "matmul: no memory for the %zd x %zd rows of a "
                            "strided operand", v[4], v[3]);
    Py_RETURN_NONE;
}

/* matmul_path(path): the path in force after asking for `path` (matmul.c's tiny_matmul_path) */
static PyObject *matmul_path(PyObject *self, PyObject *arg)
{
    long path = PyLong_AsLong(arg);
    if (path == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(tiny_matmul_path((int)path));
}

static PyObject *none(long status) { (void)status; Py_RETURN_NONE; }
static PyObject *succeeded(long status) { return PyBool_FromLong(status == 0); }

/* An entry point `py_<name>`: its arguments read as `format` says into v (ints and addresses)
   and d (floats), then `expression` evaluated without the GIL, and its value handed to
   `to_python` for what Python gets back. */
#define ENTRY_RETURNING(name, format, expression, to_python)                                   \
    static PyObject *py_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs)        \
    {                                                                                          \
        Py_ssize_t v[sizeof(format) - 1];                                                      \
        double d[sizeof(format) - 1];                                                          \
        long result;                                                                           \
        if (read_args(#name, format, args, nargs, v, d)) return NULL;                          \
        Py_BEGIN_ALLOW_THREADS                                                                 \
        result = (expression);                                                                 \
        Py_END_ALLOW_THREADS                                                                   \
        return to_python(result);                                                              \
    }

/* The same for a kernel that returns nothing: Python gets None. */
#define ENTRY(name, format, call) ENTRY_RETURNING(name, format, ((call), 0L), none)

/* scores_grad(n, M, N, grad, out, scale, causal) */
ENTRY(scores_grad, "iiiiifi",
      tiny_scores_grad((int)v[0], (int)v[1], (int)v[2], CF(3), F(4), (float)d[5], (int)v[6]))
/* kv_store(B, T, nh, hs, L, pos, qkv, row_b, row_t, keys, values) */
ENTRY(kv_store, "iiiiiiiiiii",
      kv_store((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], CF(6), v[7], v[8],
               F(9), F(10)))
/* kv_compact(n, keep, nh, hs, L, length, keys, values) */
ENTRY(kv_compact, "iiiiiiii",
      kv_compact((int)v[0], (const int64_t *)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5],
                 F(6), F(7)))
/* gelu_erf_argument(n, x, c, u) and gelu_exp_argument(n, x, c, m) */
ENTRY(gelu_erf_argument, "iifi", gelu_erf_argument((size_t)v[0], CF(1), (float)d[2], F(3)))
ENTRY(gelu_exp_argument, "iifi", gelu_exp_argument((size_t)v[0], CF(1), (float)d[2], F(3)))
/* gelu_forward(n, x, e, y) */
ENTRY(gelu_forward, "iiii", gelu_forward((size_t)v[0], CF(1), CF(2), F(3)))
/* gelu_backward(n, x, e, expm, g, c, k, gx) */
ENTRY(gelu_backward, "iiiiiffi",
      gelu_backward((size_t)v[0], CF(1), CF(2), CF(3), CF(4), (float)d[5], (float)d[6], F(7)))

/* adam_step(n, p, g, m, v, one_minus_beta1, beta2, one_minus_beta2, bias2, eps, step) */
ENTRY(adam_step, "iiiiiffffff",
      adam_step((size_t)v[0], F(1), CF(2), F(3), F(4), (float)d[5], (float)d[6], (float)d[7],
                (float)d[8], (float)d[9], (float)d[10]))

/* causal_softmax(rows, n, x, y): True, or False where softmax.c is not built */
ENTRY_RETURNING(causal_softmax, "iiii",
                tiny_causal_softmax((int64_t)v[0], (int64_t)v[1], CF(2), F(3)), succeeded)

#define FAST(name, function) {name, (PyCFunction)(void (*)(void))function, METH_FASTCALL, NULL}
static PyMethodDef methods[] = {
    FAST("bmm", bmm),
    FAST("scores_grad", py_scores_grad),
    {"matmul_path", matmul_path, METH_O, NULL},
    FAST("kv_store", py_kv_store),
    FAST("kv_compact", py_kv_compact),
    FAST("gelu_erf_argument", py_gelu_erf_argument),
    FAST("gelu_exp_argument", py_gelu_exp_argument),
    FAST("gelu_forward", py_gelu_forward),
    FAST("gelu_backward", py_gelu_backward),
    FAST("adam_step", py_adam_step),
    FAST("causal_softmax", py_causal_softmax),
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "tinyagent's C kernels (matmul.c, kvcache.c, gelu.c, adam.c, softmax.c)", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
