/* monitor_overhead.py's "minimal step tracker" floor compiled: the same work at the same hook points, in C.
 *
 * Tracker(backward, Tensor) is called in place of torch.autograd.backward. A backward on a plain tensor of one
 * element, at a depth of 0 on its thread (a thread-state dict entry, as the Python floor's threading.local), keeps
 * the loss detached unless the optimizer's step is running. `batch(batch, waited)` hands the closed step on and
 * counts the batch's samples (its first tensor's first dimension). `pre(optimizer, args, kwargs)` hands the closed
 * step on and marks the step running. `post(optimizer, args, kwargs)` closes the step: (loss, samples, monotonic
 * seconds, wall seconds), as `time.perf_counter()` and `time.time()` read them on Linux. Closed steps go to a list
 * that is emptied at 100, as the Python floor's window. No line is written. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original, *tensor_type, *loss, *closed, *window;
    long long samples;
    int in_step;
} Tracker;

static PyObject *s_detach, *s_numel, *s_shape, *s_depth;

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)((long long)t.tv_sec * 1000000000LL + t.tv_nsec) / 1e9;
}

static int hand_on(Tracker *self) {
    if (self->closed == NULL) return 0;
    int failed = PyList_Append(self->window, self->closed);
    Py_CLEAR(self->closed);
    if (failed == 0 && PyList_GET_SIZE(self->window) == 100) failed = PyList_SetSlice(self->window, 0, 100, NULL);
    return failed;
}

/* the depth of backwards on this thread: its thread-state dict's entry, 0 where there is none (-1: an error) */
static long depth_here(PyObject *dict) {
    PyObject *depth = PyDict_GetItemWithError(dict, s_depth);
    if (depth == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyLong_AsLong(depth);
}

static int set_depth(PyObject *dict, long depth) {
    PyObject *value = PyLong_FromLong(depth);
    if (value == NULL) return -1;
    int failed = PyDict_SetItem(dict, s_depth, value);
    Py_DECREF(value);
    return failed;
}

static int on_loss(Tracker *self, PyObject *tensor) {
    if (self->in_step) return 0;
    PyObject *args[1] = {tensor};
    PyObject *loss = PyObject_VectorcallMethod(s_detach, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (loss == NULL) return -1;
    Py_XSETREF(self->loss, loss);
    return 0;
}

static PyObject *Tracker_vectorcall(Tracker *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL) return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    long depth = depth_here(dict);
    if (depth == -1 && PyErr_Occurred()) return NULL;
    PyObject *tensors = PyVectorcall_NARGS(nargsf) > 0 ? args[0] : NULL;
    if (!depth && tensors != NULL && Py_TYPE(tensors) == (PyTypeObject *)self->tensor_type) {
        PyObject *call[1] = {tensors};
        PyObject *n = PyObject_VectorcallMethod(s_numel, call, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (n == NULL) return NULL;
        long numel = PyLong_AsLong(n);
        Py_DECREF(n);
        if (numel == -1 && PyErr_Occurred()) return NULL;
        if (numel == 1 && on_loss(self, tensors) < 0) return NULL;
    }
    if (set_depth(dict, depth + 1) < 0) return NULL;
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* the depth comes back whatever the backward raised, as `finally` */
    int failed = set_depth(dict, depth);
    if (result == NULL) {
        if (failed) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    } else if (failed) {
        Py_CLEAR(result);
    }
    return result;
}

static PyObject *Tracker_batch(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "batch(batch, waited)");
        return NULL;
    }
    if (hand_on(self) < 0) return NULL;
    PyObject *first = PySequence_GetItem(args[0], 0);
    if (first == NULL) return NULL;
    PyObject *shape = PyObject_GetAttr(first, s_shape);
    Py_DECREF(first);
    if (shape == NULL) return NULL;
    long long n = PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0 ? PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0))
                                                                      : 1;
    Py_DECREF(shape);
    if (n == -1 && PyErr_Occurred()) return NULL;
    self->samples += n;
    Py_RETURN_NONE;
}

static PyObject *Tracker_pre(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (hand_on(self) < 0) return NULL;
    self->in_step = 1;
    Py_RETURN_NONE;
}

static PyObject *Tracker_post(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    self->in_step = 0;
    PyObject *closed = Py_BuildValue("(OLdd)", self->loss ? self->loss : Py_None, self->samples,
                                     seconds(CLOCK_MONOTONIC), seconds(CLOCK_REALTIME));
    if (closed == NULL) return NULL;
    Py_CLEAR(self->loss);
    Py_XSETREF(self->closed, closed);
    self->samples = 0;
    Py_RETURN_NONE;
}

static PyMethodDef Tracker_methods[] = {
    {"batch", (PyCFunction)(void (*)(void))Tracker_batch, METH_FASTCALL, NULL},
    {"pre", (PyCFunction)(void (*)(void))Tracker_pre, METH_FASTCALL, NULL},
    {"post", (PyCFunction)(void (*)(void))Tracker_post, METH_FASTCALL, NULL},
    {NULL}};

static PyMemberDef Tracker_members[] = { /* what a check of the floor reads: the closed steps it keeps */
    {"closed", T_OBJECT, offsetof(Tracker, closed), READONLY, NULL},
    {"window", T_OBJECT, offsetof(Tracker, window), READONLY, NULL},
    {NULL}};

static PyObject *Tracker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *original, *tensor_type;
    if (!PyArg_ParseTuple(args, "OO:Tracker", &original, &tensor_type)) return NULL;
    PyObject *window = PyList_New(0);
    if (window == NULL) return NULL;
    Tracker *self = (Tracker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(window);
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)Tracker_vectorcall;
    Py_INCREF(original);
    self->original = original;
    Py_INCREF(tensor_type);
    self->tensor_type = tensor_type;
    self->window = window;
    return (PyObject *)self;
}

static void Tracker_dealloc(Tracker *self) {
    Py_XDECREF(self->original);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->loss);
    Py_XDECREF(self->closed);
    Py_XDECREF(self->window);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minimal_tracker.Tracker",
    .tp_basicsize = sizeof(Tracker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Tracker_new,
    .tp_dealloc = (destructor)Tracker_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Tracker, vectorcall),
    .tp_methods = Tracker_methods,
    .tp_members = Tracker_members,
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "minimal_tracker", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_minimal_tracker(void) {
    s_detach = PyUnicode_InternFromString("detach");
    s_numel = PyUnicode_InternFromString("numel");
    s_shape = PyUnicode_InternFromString("shape");
    s_depth = PyUnicode_InternFromString("minimal_tracker.depth");
    if (s_detach == NULL || s_numel == NULL || s_shape == NULL || s_depth == NULL) return NULL;
    if (PyType_Ready(&TrackerType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    Py_INCREF(&TrackerType);
    if (PyModule_AddObject(module, "Tracker", (PyObject *)&TrackerType) < 0) {
        Py_DECREF(&TrackerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
