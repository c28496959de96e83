/* The step path in C: what runs of ours at every batch, backward and optimizer step of the usual loop.
 *
 * Each object here is the compiled twin of a Python function of ascend_tune.runtime (named beside it). It does
 * what that function does where the state is the usual one (one optimizer passed, no GradScaler or optimizer watch
 * at work, steps ended by the optimizer), and hands every other case to the Python function, which stays the
 * definition. Module: ascend_tune_step_path, built by ascend_tune/runtime/compiled.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#ifndef Py_TPFLAGS_HAVE_VECTORCALL /* its name before Python 3.12 made it public */
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

static PyObject *py_backward, *py_step_pre_hook, *py_optimizer_post, *py_batch, *py_close; /* StepTracker's */
static PyObject *optimizer_source, *perf_counter, *wall_clock, *tensor_type, *batch_size, *len_function_stack;
static PyObject *s_scaled, *s_watch, *s_detach, *s_numel, *s_internal, *s_backward, *s_data, *s_finished;
static PyObject *s_log_broken, *s_log_every, *s_windows, *s_pending, *s_events, *s_clock, *s_commit;
static PyObject *s_shape, *s_step, *s_log_due, *s_on, *s_handed_out, *s_commit_failed, *s_on_backward, *s_on_batch;

static inline int truth(PyObject *o) {
    if (o == Py_True) return 1;
    if (o == NULL || o == Py_False || o == Py_None) return 0;
    return PyObject_IsTrue(o);
}

static inline void put(PyObject **slot, PyObject *value) { /* steals nothing: a new reference in the slot */
    PyObject *old = *slot;
    Py_XINCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

static inline int is_none(PyObject *o) { return o == NULL || o == Py_None; }

/* seconds of a Python clock (time.perf_counter / time.time), -1.0 with an error set */
static double seconds(PyObject *clock) {
    PyObject *t = PyObject_CallNoArgs(clock);
    if (t == NULL) return -1.0;
    double v = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return v;
}

/* object.attr += amount for a float attribute (HostTimes's sums) */
static int add_seconds(PyObject *owner, PyObject *name, double amount) {
    PyObject *now = PyObject_GetAttr(owner, name);
    if (now == NULL) return -1;
    double v = PyFloat_AsDouble(now);
    Py_DECREF(now);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    PyObject *sum = PyFloat_FromDouble(v + amount);
    if (sum == NULL) return -1;
    int r = PyObject_SetAttr(owner, name, sum);
    Py_DECREF(sum);
    return r;
}

/* what Python's `except Exception as exc: monitor._events.failed(where, exc)` does (where NULL:
   `monitor._commit_failed(exc)`); clears the error, unless it is no Exception (KeyboardInterrupt: not ours) */
static void contain(PyObject *monitor, const char *where) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) return;
    if (!PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
        PyErr_Restore(type, value, tb);
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    PyObject *exc = value ? value : Py_None, *r = NULL;
    if (where == NULL) {
        r = PyObject_CallMethodOneArg(monitor, s_commit_failed, exc);
    } else {
        PyObject *events = PyObject_GetAttr(monitor, s_events);
        r = events ? PyObject_CallMethod(events, "failed", "sO", where, exc) : NULL;
        Py_XDECREF(events);
    }
    Py_XDECREF(r);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (PyErr_Occurred()) PyErr_Clear(); /* reporting failed too: the loop goes on */
}

/* ---- ClosedStep (runtime/steps.py's ClosedStep, the same fields) ----------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *step, *loss, *samples, *skipped, *at, *wall, *losses;
} Closed;

static PyTypeObject ClosedType;

static int Closed_traverse(Closed *self, visitproc visit, void *arg) {
    Py_VISIT(self->step); Py_VISIT(self->loss); Py_VISIT(self->samples); Py_VISIT(self->skipped);
    Py_VISIT(self->at); Py_VISIT(self->wall); Py_VISIT(self->losses);
    return 0;
}

static int Closed_clear(Closed *self) {
    Py_CLEAR(self->step); Py_CLEAR(self->loss); Py_CLEAR(self->samples); Py_CLEAR(self->skipped);
    Py_CLEAR(self->at); Py_CLEAR(self->wall); Py_CLEAR(self->losses);
    return 0;
}

static void Closed_dealloc(Closed *self) {
    PyObject_GC_UnTrack(self);
    Closed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *closed_new(PyObject *step, PyObject *loss, PyObject *samples, PyObject *skipped, PyObject *at,
                            PyObject *wall, PyObject *losses) {
    Closed *c = PyObject_GC_New(Closed, &ClosedType);
    if (c == NULL) return NULL;
    Py_INCREF(step); c->step = step;
    Py_INCREF(loss); c->loss = loss;
    Py_INCREF(samples); c->samples = samples;
    Py_INCREF(skipped); c->skipped = skipped;
    Py_INCREF(at); c->at = at;
    Py_INCREF(wall); c->wall = wall;
    Py_INCREF(losses); c->losses = losses;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

static PyObject *Closed_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"step", "loss", "samples", "skipped", "at", "wall", "losses", NULL};
    PyObject *step, *loss, *samples, *skipped, *at, *wall, *losses = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|O:ClosedStep", names, &step, &loss, &samples, &skipped,
                                     &at, &wall, &losses))
        return NULL;
    return closed_new(step, loss, samples, skipped, at, wall, losses);
}

static PyObject *Closed_repr(Closed *self) {
    return PyUnicode_FromFormat("ClosedStep(step=%S, loss=%R, samples=%S, skipped=%S, at=%S, wall=%S, losses=%R)",
                                self->step, self->loss, self->samples, self->skipped, self->at, self->wall,
                                self->losses);
}

static PyMemberDef Closed_members[] = {
    {"step", T_OBJECT, offsetof(Closed, step), 0, NULL},
    {"loss", T_OBJECT, offsetof(Closed, loss), 0, NULL},
    {"samples", T_OBJECT, offsetof(Closed, samples), 0, NULL},
    {"skipped", T_OBJECT, offsetof(Closed, skipped), 0, NULL},
    {"at", T_OBJECT, offsetof(Closed, at), 0, "time.perf_counter() when the step ended"},
    {"wall", T_OBJECT, offsetof(Closed, wall), 0, "time.time() when the step ended"},
    {"losses", T_OBJECT, offsetof(Closed, losses), 0, NULL},
    {NULL}};

static PyTypeObject ClosedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_tune_step_path.ClosedStep",
    .tp_doc = "One step as it ended (runtime/steps.py's ClosedStep, made by the compiled step path).",
    .tp_basicsize = sizeof(Closed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Closed_tp_new,
    .tp_dealloc = (destructor)Closed_dealloc,
    .tp_traverse = (traverseproc)Closed_traverse,
    .tp_clear = (inquiry)Closed_clear,
    .tp_repr = (reprfunc)Closed_repr,
    .tp_members = Closed_members,
};

/* ---- Tracker: the base of the compiled StepTracker (runtime/steps.py) ------------------------------------------ */

/* The fields StepTracker's Python methods read and write as attributes (member descriptors): both sides see one
   state. Each holds what Python put there (NULL reads as None). */
typedef struct {
    PyObject_HEAD
    PyObject *next_step, *explicit_, *source, *step_optimizer, *found, *on_end, *on_commit, *mean,
        *samples_per_step, *loss, *backwards, *in_step, *closure_loss, *absorb, *post_count, *closed, *samples,
        *names, *others, *shared;
} Tracker;

#define TRACKER_FIELDS(X) X(next_step) X(explicit_) X(source) X(step_optimizer) X(found) X(on_end) X(on_commit) \
    X(mean) X(samples_per_step) X(loss) X(backwards) X(in_step) X(closure_loss) X(absorb) X(post_count) X(closed) \
    X(samples) X(names) X(others) X(shared)

static int Tracker_traverse(Tracker *self, visitproc visit, void *arg) {
#define VISIT(f) Py_VISIT(self->f);
    TRACKER_FIELDS(VISIT)
    return 0;
}

static int Tracker_clear(Tracker *self) {
#define CLEAR(f) Py_CLEAR(self->f);
    TRACKER_FIELDS(CLEAR)
    return 0;
}

static void Tracker_dealloc(Tracker *self) {
    PyObject_GC_UnTrack(self);
    Tracker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *call_python(PyObject *function, PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *all[8];
    if (nargs > 7) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    all[0] = self;
    for (Py_ssize_t i = 0; i < nargs; i++) all[i + 1] = args[i];
    return PyObject_Vectorcall(function, all, nargs + 1, NULL);
}

static PyObject *increment(PyObject *count) {
    Py_ssize_t n = PyLong_AsSsize_t(count);
    if (n == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromSsize_t(n + 1);
}

/* StepTracker.backward: the usual case, the step's first loss with the optimizer's steps ending steps */
static PyObject *Tracker_backward(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) return call_python(py_backward, (PyObject *)self, args, nargs);
    PyObject *loss = args[0];
    if (truth(self->in_step)) {
        if (is_none(self->closure_loss)) put(&self->closure_loss, loss);
        Py_RETURN_FALSE;
    }
    if (self->source != optimizer_source || truth(self->explicit_) || !is_none(self->loss))
        return call_python(py_backward, (PyObject *)self, args, nargs);
    PyObject *backwards = increment(self->backwards ? self->backwards : Py_None);
    if (backwards == NULL) return NULL;
    put(&self->shared, Py_None);
    put(&self->loss, loss);
    Py_XSETREF(self->backwards, backwards);
    Py_RETURN_FALSE;
}

static int commit_closed(Tracker *self) {
    PyObject *closed = self->closed;
    if (is_none(closed)) return 0;
    self->closed = Py_None;
    Py_INCREF(Py_None);
    PyObject *r = PyObject_CallOneArg(self->on_commit, closed);
    Py_DECREF(closed);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* StepTracker.step_pre_hook: an optimizer already named */
static PyObject *Tracker_step_pre_hook(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || self->names == NULL || !PyDict_CheckExact(self->names))
        return call_python(py_step_pre_hook, (PyObject *)self, args, nargs);
    PyObject *key = PyLong_FromVoidPtr(args[0]);
    if (key == NULL) return NULL;
    int known = PyDict_Contains(self->names, key);
    Py_DECREF(key);
    if (known <= 0) {
        if (known < 0) return NULL;
        return call_python(py_step_pre_hook, (PyObject *)self, args, nargs);
    }
    if (commit_closed(self) < 0) return NULL;
    put(&self->in_step, Py_True);
    put(&self->closure_loss, Py_None);
    Py_RETURN_NONE;
}

/* StepTracker._close(skipped=False) where nothing is held, merged or divided; else the Python method */
static int close_step(Tracker *self) {
    PyObject *loss = self->loss ? self->loss : Py_None;
    int divide = 0;
    if (!is_none(loss) && truth(self->mean)) { /* what Python's `loss is not None and mean and backwards > 1` reads */
        Py_ssize_t backwards = self->backwards ? PyLong_AsSsize_t(self->backwards) : 0;
        if (backwards == -1 && PyErr_Occurred()) return -1;
        divide = backwards > 1;
    }
    int others = self->others != NULL && (!PyDict_CheckExact(self->others) || PyDict_GET_SIZE(self->others) > 0);
    if (!is_none(self->closed) || divide || others || !self->next_step || !PyLong_CheckExact(self->next_step)) {
        PyObject *r = PyObject_CallFunctionObjArgs(py_close, (PyObject *)self, Py_False, NULL);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    double at = seconds(perf_counter);
    if (at == -1.0 && PyErr_Occurred()) return -1;
    double wall = seconds(wall_clock);
    if (wall == -1.0 && PyErr_Occurred()) return -1;
    PyObject *samples = self->samples ? self->samples : Py_None;
    Py_INCREF(loss);
    Py_INCREF(samples);
    put(&self->loss, Py_None);
    Py_XSETREF(self->backwards, PyLong_FromLong(0));
    if (!is_none(samples)) Py_XSETREF(self->samples, PyLong_FromLong(0));
    if (!is_none(self->samples_per_step)) {
        Py_DECREF(samples);
        samples = self->samples_per_step;
        Py_INCREF(samples);
    }
    PyObject *step = self->next_step;
    Py_INCREF(step);
    PyObject *next = increment(step);
    PyObject *at_o = PyFloat_FromDouble(at), *wall_o = PyFloat_FromDouble(wall);
    PyObject *closed = NULL;
    if (next != NULL && at_o != NULL && wall_o != NULL) {
        Py_XSETREF(self->next_step, next);
        next = NULL;
        closed = closed_new(step, loss, samples, Py_False, at_o, wall_o, Py_None);
    }
    Py_XDECREF(next);
    Py_XDECREF(at_o);
    Py_XDECREF(wall_o);
    Py_DECREF(loss);
    Py_DECREF(samples);
    if (closed == NULL) {
        Py_DECREF(step);
        return -1;
    }
    Py_XSETREF(self->closed, closed);
    int rc = 0;
    if (!is_none(self->on_end)) {
        PyObject *r = PyObject_CallOneArg(self->on_end, step);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(step);
    return rc;
}

/* StepTracker.optimizer_post: the steps' optimizer stepped, no closure loss, nothing to absorb or share */
static PyObject *Tracker_optimizer_post(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || !truth(self->found) || args[0] != self->step_optimizer || !is_none(self->closure_loss) ||
        truth(self->absorb) || truth(self->explicit_) || (is_none(self->loss) && !is_none(self->shared)) ||
        !self->post_count)
        return call_python(py_optimizer_post, (PyObject *)self, args, nargs);
    PyObject *count = increment(self->post_count);
    if (count == NULL) return NULL;
    put(&self->in_step, Py_False);
    Py_XSETREF(self->post_count, count);
    put(&self->closure_loss, Py_None);
    put(&self->absorb, Py_False);
    if (close_step(self) < 0) return NULL;
    Py_RETURN_NONE;
}

/* StepTracker.batch */
static PyObject *tracker_batch(Tracker *self, PyObject *samples) {
    if (commit_closed(self) < 0) return NULL;
    if (!is_none(self->samples)) {
        if (is_none(samples)) {
            put(&self->samples, Py_None);
        } else {
            PyObject *sum = PyNumber_Add(self->samples, samples);
            if (sum == NULL) return NULL;
            Py_XSETREF(self->samples, sum);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *Tracker_batch(Tracker *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) return call_python(py_batch, (PyObject *)self, args, nargs);
    return tracker_batch(self, args[0]);
}

static PyMethodDef Tracker_methods[] = {
    {"backward", (PyCFunction)(void (*)(void))Tracker_backward, METH_FASTCALL, NULL},
    {"step_pre_hook", (PyCFunction)(void (*)(void))Tracker_step_pre_hook, METH_FASTCALL, NULL},
    {"optimizer_post", (PyCFunction)(void (*)(void))Tracker_optimizer_post, METH_FASTCALL, NULL},
    {"batch", (PyCFunction)(void (*)(void))Tracker_batch, METH_FASTCALL, NULL},
    {NULL}};

static PyMemberDef Tracker_members[] = {
#define MEMBER(f, name) {name, T_OBJECT, offsetof(Tracker, f), 0, NULL},
    MEMBER(next_step, "next_step") MEMBER(explicit_, "explicit") MEMBER(source, "source")
    MEMBER(step_optimizer, "step_optimizer") MEMBER(found, "_found") MEMBER(on_end, "on_end")
    MEMBER(on_commit, "_on_commit") MEMBER(mean, "_mean") MEMBER(samples_per_step, "_samples_per_step")
    MEMBER(loss, "_loss") MEMBER(backwards, "_backwards") MEMBER(in_step, "_in_step")
    MEMBER(closure_loss, "_closure_loss") MEMBER(absorb, "_absorb") MEMBER(post_count, "_post_count")
    MEMBER(closed, "_closed") MEMBER(samples, "_samples") MEMBER(names, "_names") MEMBER(others, "_others")
    MEMBER(shared, "_shared")
    {NULL}};

static PyTypeObject TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_tune_step_path.Tracker",
    .tp_doc = "The compiled base of StepTracker: its hot methods and the fields they use.",
    .tp_basicsize = sizeof(Tracker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Tracker_dealloc,
    .tp_traverse = (traverseproc)Tracker_traverse,
    .tp_clear = (inquiry)Tracker_clear,
    .tp_methods = Tracker_methods,
    .tp_members = Tracker_members,
};

/* ---- the monitor's hooks: backward (capture.patch_backward + TrainingMonitor._on_backward), the batch
   (TrainingMonitor._on_batch), the commit (TrainingMonitor._on_commit) --------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *monitor, *tracker, *host, *original, *on_done, *graph_task, *marks, *scalar, *wrapped_name, *doc;
} Hooks;

static PyTypeObject HooksType;

static int Hooks_traverse(Hooks *self, visitproc visit, void *arg) {
    Py_VISIT(self->monitor); Py_VISIT(self->tracker); Py_VISIT(self->host); Py_VISIT(self->original);
    Py_VISIT(self->on_done); Py_VISIT(self->graph_task); Py_VISIT(self->marks); Py_VISIT(self->scalar);
    Py_VISIT(self->wrapped_name); Py_VISIT(self->doc);
    return 0;
}

static int Hooks_clear(Hooks *self) {
    Py_CLEAR(self->monitor); Py_CLEAR(self->tracker); Py_CLEAR(self->host); Py_CLEAR(self->original);
    Py_CLEAR(self->on_done); Py_CLEAR(self->graph_task); Py_CLEAR(self->marks); Py_CLEAR(self->scalar);
    Py_CLEAR(self->wrapped_name); Py_CLEAR(self->doc);
    return 0;
}

static void Hooks_dealloc(Hooks *self) {
    PyObject_GC_UnTrack(self);
    Hooks_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the attribute's value is None (1), is not (0), or -1 with an error */
static int attr_is_none(PyObject *owner, PyObject *name) {
    PyObject *v = PyObject_GetAttr(owner, name);
    if (v == NULL) return -1;
    int none = v == Py_None;
    Py_DECREF(v);
    return none;
}

/* TrainingMonitor._on_backward: the loss detached and handed to the tracker; whether its end is wanted */
static int on_loss(Hooks *self, PyObject *tensor) {
    int plain = attr_is_none(self->monitor, s_scaled);
    if (plain == 1) plain = attr_is_none(self->monitor, s_watch);
    if (plain == 1) {
        PyObject *depth = PyObject_CallNoArgs(len_function_stack);
        if (depth == NULL) plain = -1;
        else {
            plain = !truth(depth);
            Py_DECREF(depth);
        }
    }
    if (plain != 1 || !PyObject_TypeCheck(self->tracker, &TrackerType)) {
        if (plain < 0) PyErr_Clear(); /* the Python hook meets it again, and contains it */
        PyObject *r = PyObject_CallMethodOneArg(self->monitor, s_on_backward, tensor);
        if (r == NULL) return -1; /* the Python hook contains its own: this is not ours */
        int wants = truth(r);
        Py_DECREF(r);
        return wants;
    }
    PyObject *loss = PyObject_CallMethodNoArgs(tensor, s_detach);
    PyObject *r = loss ? Tracker_backward((Tracker *)self->tracker, &loss, 1) : NULL;
    Py_XDECREF(loss);
    if (r == NULL) {
        contain(self->monitor, "the loss capture");
        return PyErr_Occurred() ? -1 : 0;
    }
    int wants = truth(r);
    Py_DECREF(r);
    return wants;
}

/* capture.patch_backward's wrapper: torch.autograd.backward while the block runs */
static PyObject *Hooks_vectorcall(Hooks *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *tensors = nargs > 0 ? args[0] : NULL;
    if (tensors == NULL && kwnames != NULL) { /* backward(tensors=...) */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "tensors") == 0)
                tensors = args[nargs + i]; /* keyword values follow the positional ones */
    }
    PyObject *loss = NULL;
    if (tensors != NULL && Py_TYPE(tensors) == (PyTypeObject *)tensor_type) {
        loss = tensors;
        Py_INCREF(loss);
    } else if (tensors != NULL) {
        loss = PyObject_CallOneArg(self->scalar, tensors);
        if (loss == NULL) return NULL;
    }
    int counts = loss != NULL && loss != Py_None;
    if (counts) {
        PyObject *n = PyObject_CallMethodNoArgs(loss, s_numel);
        counts = n != NULL && PyLong_Check(n) && PyLong_AsLong(n) == 1;
        Py_XDECREF(n);
    }
    if (counts) {
        PyObject *task = PyObject_CallNoArgs(self->graph_task);
        counts = task != NULL && PyLong_Check(task) && PyLong_AsLong(task) == -1;
        Py_XDECREF(task);
    }
    if (counts) {
        PyObject *depth = PyObject_GetAttr(self->marks, s_internal);
        if (depth == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
        else counts = depth != NULL && !truth(depth);
        Py_XDECREF(depth);
    }
    if (PyErr_Occurred()) {
        Py_XDECREF(loss);
        return NULL;
    }
    if (!counts) {
        Py_XDECREF(loss);
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    }
    int wants = on_loss(self, loss);
    Py_DECREF(loss);
    if (wants < 0) return NULL;
    double began = seconds(perf_counter);
    if (began == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    if (result == NULL) return NULL;
    double ended = seconds(perf_counter);
    if ((ended == -1.0 && PyErr_Occurred()) || add_seconds(self->host, s_backward, ended - began) < 0) {
        contain(self->monitor, "the loss capture"); /* the backward ran: its result goes back to the loop */
        if (PyErr_Occurred()) {
            Py_DECREF(result);
            return NULL;
        }
    }
    if (wants) {
        PyObject *r = PyObject_CallNoArgs(self->on_done);
        if (r == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(r);
    }
    return result;
}

/* TrainingMonitor._on_batch: the loop waited `waited` seconds for `batch` */
static PyObject *on_batch(Hooks *self, PyObject *batch, PyObject *waited) {
    int plain = attr_is_none(self->monitor, s_watch);
    if (plain != 1 || !PyObject_TypeCheck(self->tracker, &TrackerType)) {
        if (plain < 0) PyErr_Clear();
        return PyObject_CallMethodObjArgs(self->monitor, s_on_batch, batch, waited, NULL);
    }
    double w = PyFloat_AsDouble(waited);
    PyObject *n = NULL, *r = NULL;
    if (!(w == -1.0 && PyErr_Occurred()) && add_seconds(self->host, s_data, w) == 0) {
        PyObject *first = NULL;
        if ((PyList_CheckExact(batch) || PyTuple_CheckExact(batch)) && PySequence_Fast_GET_SIZE(batch) > 0)
            first = PySequence_Fast_GET_ITEM(batch, 0);
        if (first != NULL && Py_TYPE(first) == (PyTypeObject *)tensor_type) {
            /* first.size(0) if first.dim() else batch_size(batch): one call of torch's, its shape */
            PyObject *shape = PyObject_GetAttr(first, s_shape);
            if (shape != NULL && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0) {
                n = PyTuple_GET_ITEM(shape, 0);
                Py_INCREF(n);
            } else if (shape != NULL) {
                n = PyObject_CallOneArg(batch_size, batch);
            }
            Py_XDECREF(shape);
        } else {
            n = PyObject_CallOneArg(batch_size, batch);
        }
        if (n != NULL) r = tracker_batch((Tracker *)self->tracker, n);
    }
    Py_XDECREF(n);
    if (r == NULL) contain(self->monitor, "the batch count");
    Py_XDECREF(r);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Hooks_on_batch(Hooks *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "on_batch(batch, waited)");
        return NULL;
    }
    return on_batch(self, args[0], args[1]);
}

/* TrainingMonitor._on_commit: count the step; a log step (or a read due) goes on in Python (_log_due) */
static PyObject *Hooks_on_commit(Hooks *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "on_commit(closed)");
        return NULL;
    }
    PyObject *closed = args[0];
    PyObject *finished = PyObject_GetAttr(self->monitor, s_finished);
    PyObject *broken = finished ? PyObject_GetAttr(self->monitor, s_log_broken) : NULL;
    int skip = broken != NULL && (truth(finished) || truth(broken));
    Py_XDECREF(finished);
    Py_XDECREF(broken);
    if (broken == NULL) { /* the monitor's fields unreadable: the step log stops, as for any failure below */
        contain(self->monitor, NULL);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (skip) Py_RETURN_NONE;
    /* self.clock.commit(closed); (closed.step + 1) % self.log_every == 0 or self._windows.pending */
    int due = -1;
    PyObject *clock = PyObject_GetAttr(self->monitor, s_clock);
    PyObject *r = clock ? PyObject_CallMethodOneArg(clock, s_commit, closed) : NULL;
    Py_XDECREF(clock);
    if (r != NULL) {
        Py_DECREF(r);
        PyObject *step = PyObject_GetAttr(closed, s_step);
        PyObject *every = step ? PyObject_GetAttr(self->monitor, s_log_every) : NULL;
        Py_ssize_t n = step ? PyLong_AsSsize_t(step) : -1, k = every ? PyLong_AsSsize_t(every) : -1;
        Py_XDECREF(step);
        Py_XDECREF(every);
        if (!PyErr_Occurred() && k > 0) {
            due = ((n + 1) % k + k) % k == 0; /* Python's modulo: never negative */
            if (!due) {
                PyObject *windows = PyObject_GetAttr(self->monitor, s_windows);
                PyObject *pending = windows ? PyObject_GetAttr(windows, s_pending) : NULL;
                due = pending ? truth(pending) : -1;
                Py_XDECREF(pending);
                Py_XDECREF(windows);
            }
        } else if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ZeroDivisionError, "log_every must be positive");
        }
    }
    if (due == 1) {
        r = PyObject_CallMethodOneArg(self->monitor, s_log_due, closed);
        if (r == NULL) due = -1;
        Py_XDECREF(r);
    }
    if (due < 0) {
        contain(self->monitor, NULL);
        if (PyErr_Occurred()) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Hooks_get_name(Hooks *self, void *closure) {
    Py_INCREF(self->wrapped_name);
    return self->wrapped_name;
}

static PyObject *Hooks_get_doc(Hooks *self, void *closure) {
    Py_INCREF(self->doc);
    return self->doc;
}

static PyGetSetDef Hooks_getset[] = {
    {"__name__", (getter)Hooks_get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)Hooks_get_name, NULL, NULL, NULL},
    {"__doc__", (getter)Hooks_get_doc, NULL, NULL, NULL},
    {NULL}};

static PyMemberDef Hooks_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Hooks, original), READONLY, NULL},
    {NULL}};

static PyMethodDef Hooks_methods[] = {
    {"on_batch", (PyCFunction)(void (*)(void))Hooks_on_batch, METH_FASTCALL, NULL},
    {"on_commit", (PyCFunction)(void (*)(void))Hooks_on_commit, METH_FASTCALL, NULL},
    {NULL}};

static PyObject *Hooks_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Hooks *self = PyObject_GC_New(Hooks, type);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)Hooks_vectorcall;
    PyObject **fields[] = {&self->monitor, &self->tracker, &self->host, &self->original, &self->on_done,
                           &self->graph_task, &self->marks, &self->scalar};
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 8) {
        for (int i = 0; i < 8; i++) *fields[i] = NULL;
        self->wrapped_name = self->doc = NULL;
        Py_DECREF(self);
        PyErr_SetString(PyExc_TypeError,
                        "Hooks(monitor, tracker, host, original, on_done, graph_task, marks, scalar)");
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        *fields[i] = PyTuple_GET_ITEM(args, i);
        Py_INCREF(*fields[i]);
    }
    self->wrapped_name = PyObject_GetAttrString(self->original, "__name__");
    if (self->wrapped_name == NULL) {
        PyErr_Clear();
        self->wrapped_name = PyUnicode_FromString("backward");
    }
    self->doc = PyObject_GetAttrString(self->original, "__doc__");
    if (self->doc == NULL) {
        PyErr_Clear();
        self->doc = Py_None;
        Py_INCREF(Py_None);
    }
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyTypeObject HooksType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_tune_step_path.Hooks",
    .tp_basicsize = sizeof(Hooks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Hooks_tp_new,
    .tp_dealloc = (destructor)Hooks_dealloc,
    .tp_traverse = (traverseproc)Hooks_traverse,
    .tp_clear = (inquiry)Hooks_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Hooks, vectorcall),
    .tp_methods = Hooks_methods,
    .tp_members = Hooks_members,
    .tp_getset = Hooks_getset,
};

/* ---- Marked: capture.iterate_marked, the loader's batches each reported with the seconds the loop waited ----- */

typedef struct {
    PyObject_HEAD
    PyObject *iterator, *on_batch, *indices;
} Marked;

static int Marked_traverse(Marked *self, visitproc visit, void *arg) {
    Py_VISIT(self->iterator); Py_VISIT(self->on_batch); Py_VISIT(self->indices);
    return 0;
}

static int Marked_clear(Marked *self) {
    Py_CLEAR(self->iterator); Py_CLEAR(self->on_batch); Py_CLEAR(self->indices);
    return 0;
}

static void Marked_dealloc(Marked *self) {
    PyObject_GC_UnTrack(self);
    Marked_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Marked_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *iterable, *on_batch, *indices = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O:iterate_marked", &iterable, &on_batch, &indices)) return NULL;
    PyObject *iterator = PyObject_GetIter(iterable);
    if (iterator == NULL) return NULL;
    Marked *self = PyObject_GC_New(Marked, type);
    if (self == NULL) {
        Py_DECREF(iterator);
        return NULL;
    }
    self->iterator = iterator;
    Py_INCREF(on_batch); self->on_batch = on_batch;
    Py_INCREF(indices); self->indices = indices;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *Marked_next(Marked *self) {
    if (self->iterator == NULL) return NULL; /* ended: a generator's return stays ended */
    double began = seconds(perf_counter);
    if (began == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *batch = PyIter_Next(self->iterator);
    if (batch == NULL) {
        Py_CLEAR(self->iterator);
        return NULL;
    }
    double ended = seconds(perf_counter);
    PyObject *waited = ended == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(ended - began);
    if (waited == NULL) goto fail;
    if (!is_none(self->indices)) {
        PyObject *on = PyObject_GetAttr(self->indices, s_on);
        int yes = on != NULL && truth(on);
        Py_XDECREF(on);
        PyObject *r = on == NULL ? NULL : yes ? PyObject_CallMethodNoArgs(self->indices, s_handed_out) : Py_None;
        if (r == NULL) goto fail;
        if (r != Py_None) Py_DECREF(r);
    }
    PyObject *on = self->on_batch, *r; /* the compiled hook's bound on_batch: called without a call's work */
    if (PyCFunction_Check(on) && PyCFunction_GET_SELF(on) != NULL && Py_TYPE(PyCFunction_GET_SELF(on)) == &HooksType
        && ((PyCFunctionObject *)on)->m_ml->ml_meth == (PyCFunction)(void (*)(void))Hooks_on_batch)
        r = on_batch((Hooks *)PyCFunction_GET_SELF(on), batch, waited);
    else
        r = PyObject_CallFunctionObjArgs(on, batch, waited, NULL);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    Py_DECREF(waited);
    return batch;
fail: /* as a generator: an exception that leaves it ends it */
    Py_XDECREF(waited);
    Py_DECREF(batch);
    Py_CLEAR(self->iterator);
    return NULL;
}

static PyTypeObject MarkedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_tune_step_path.iterate_marked",
    .tp_doc = "capture.iterate_marked: yield from the iterator, reporting each batch and the seconds waited.",
    .tp_basicsize = sizeof(Marked),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Marked_tp_new,
    .tp_dealloc = (destructor)Marked_dealloc,
    .tp_traverse = (traverseproc)Marked_traverse,
    .tp_clear = (inquiry)Marked_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Marked_next,
};

/* ---- the module --------------------------------------------------------------------------------------------- */

/* setup(tracker_class, optimizer_source, perf_counter, time, Tensor, batch_size, len_stack) */
static PyObject *setup(PyObject *module, PyObject *args) {
    PyObject *tracker_class;
    PyObject *given[6];
    if (!PyArg_ParseTuple(args, "OOOOOOO:setup", &tracker_class, &given[0], &given[1], &given[2], &given[3],
                          &given[4], &given[5]))
        return NULL;
    PyObject **into[] = {&optimizer_source, &perf_counter, &wall_clock, &tensor_type, &batch_size,
                         &len_function_stack};
    for (int i = 0; i < 6; i++) put(into[i], given[i]);
    struct { PyObject **slot; PyObject *owner; const char *name; } methods[] = {
        {&py_backward, tracker_class, "backward"}, {&py_step_pre_hook, tracker_class, "step_pre_hook"},
        {&py_optimizer_post, tracker_class, "optimizer_post"}, {&py_batch, tracker_class, "batch"},
        {&py_close, tracker_class, "_close"}};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        PyObject *f = PyObject_GetAttrString(methods[i].owner, methods[i].name);
        if (f == NULL) return NULL;
        Py_XSETREF(*methods[i].slot, f);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"setup", setup, METH_VARARGS, "The Python functions the compiled ones hand unusual cases to."},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "ascend_tune_step_path",
                                        "The step path in C (ascend_tune/runtime/step_path.c).", -1, module_methods};

PyMODINIT_FUNC PyInit_ascend_tune_step_path(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_scaled, "_scaled"}, {&s_watch, "_watch"}, {&s_detach, "detach"}, {&s_numel, "numel"},
        {&s_internal, "internal"}, {&s_backward, "backward"}, {&s_data, "data"}, {&s_finished, "_finished"},
        {&s_log_broken, "_log_broken"}, {&s_log_every, "log_every"}, {&s_windows, "_windows"},
        {&s_pending, "pending"}, {&s_events, "_events"}, {&s_clock, "clock"}, {&s_commit, "commit"},
        {&s_shape, "shape"}, {&s_step, "step"}, {&s_log_due, "_log_due"}, {&s_on, "on"},
        {&s_handed_out, "handed_out"}, {&s_commit_failed, "_commit_failed"},
        {&s_on_backward, "_on_backward"}, {&s_on_batch, "_on_batch"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    PyTypeObject *types[] = {&ClosedType, &TrackerType, &HooksType, &MarkedType};
    const char *type_names[] = {"ClosedStep", "Tracker", "Hooks", "iterate_marked"};
    for (int i = 0; i < 4; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, type_names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
