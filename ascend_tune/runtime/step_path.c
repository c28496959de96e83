/* The step path in C: what runs of ours at every batch, backward and optimizer step of the usual loop.
 *
 * Each object here is the compiled twin of a Python function of ascend_tune.runtime (named beside it). It does
 * what that function does where the state is the usual one (one optimizer passed, no GradScaler or optimizer watch
 * at work, steps ended by the optimizer), and hands every other case to the Python function, which stays the
 * definition. Module: ascend_tune_step_path, built by ascend_tune/runtime/compiled.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 */
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif

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

static int direct_clocks; /* perf_counter and wall_clock are the time module's own, read here as they read */

/* a clock's reading as the time module makes it a float (CPython's pytime: the timespec in integer nanoseconds,
   then whole seconds exactly, else the nanoseconds over 1e9) */
static double clock_seconds(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1.0;
    }
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    volatile double d; /* as pytime's: no rounding mode of the optimizer's */
    if (ns % 1000000000LL == 0) {
        d = (double)(ns / 1000000000LL);
    } else {
        d = (double)ns;
        d /= 1e9;
    }
    return d;
}

/* seconds of a Python clock (time.perf_counter / time.time), -1.0 with an error set */
static double seconds(PyObject *clock) {
#ifdef __linux__
    if (direct_clocks && clock == perf_counter) return clock_seconds(CLOCK_MONOTONIC);
    if (direct_clocks && clock == wall_clock) return clock_seconds(CLOCK_REALTIME);
#endif
    PyObject *t = PyObject_CallNoArgs(clock);
    if (t == NULL) return -1.0;
    double v = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return v;
}

/* ---- slots: the fields read at every step, where they lie in the instance --------------------------------------
   The classes whose fields the step path reads at every step or line declare them as __slots__ (compiled.StepFields
   for the monitor, StepClock, LogWindows, HostTimes, the two sinks, LineFile, Outputs). Where each lies in an
   instance of the class is found once, from its member descriptor; a read is then a load. A name the class resolves
   to anything else (a subclass's property), an instance of another class, or a slot not set: read and written by
   name. */
typedef struct {
    PyTypeObject *type; /* the class it was found for (held by whoever holds the Slot) */
    Py_ssize_t at;      /* its offset in the instance; 0: none (by name) */
    PyObject *name;
} Slot;

static void slot_find(Slot *slot, PyObject *type, PyObject *name) {
    PyTypeObject *t = PyType_Check(type) ? (PyTypeObject *)type : NULL;
    slot->type = t;
    slot->at = 0;
    slot->name = name;
    if (t == NULL || t->tp_getattro != PyObject_GenericGetAttr || t->tp_setattro != PyObject_GenericSetAttr)
        return; /* a class with attribute access of its own (__getattribute__, __setattr__): by name */
    PyObject *found = PyObject_GetAttr(type, name); /* a slot's member descriptor, itself */
    if (found == NULL) {
        PyErr_Clear();
        return;
    }
    if (Py_TYPE(found) == &PyMemberDescr_Type && PyType_IsSubtype(slot->type, PyDescr_TYPE(found))) {
        PyMemberDef *member = ((PyMemberDescrObject *)found)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0)
            slot->at = member->offset;
    }
    Py_DECREF(found);
}

static inline PyObject **slot_in(PyObject *owner, const Slot *slot) {
    return slot->at > 0 && Py_TYPE(owner) == slot->type ? (PyObject **)((char *)owner + slot->at) : NULL;
}

/* owner.<name>: a new reference, or NULL with an error */
static inline PyObject *slot_get(PyObject *owner, const Slot *slot) {
    PyObject **in = slot_in(owner, slot);
    if (in != NULL && *in != NULL) return Py_NewRef(*in);
    return PyObject_GetAttr(owner, slot->name);
}

/* owner.<name> = value: 0, or -1 with an error */
static inline int slot_set(PyObject *owner, const Slot *slot, PyObject *value) {
    PyObject **in = slot_in(owner, slot);
    if (in == NULL) return PyObject_SetAttr(owner, slot->name, value);
    Py_XSETREF(*in, Py_NewRef(value));
    return 0;
}

/* the attribute's value is None (1), is not (0), or -1 with an error */
static int attr_is_none(PyObject *owner, PyObject *name) {
    PyObject *v = PyObject_GetAttr(owner, name);
    if (v == NULL) return -1;
    int none = v == Py_None;
    Py_DECREF(v);
    return none;
}

static inline int slot_is_none(PyObject *owner, const Slot *slot) {
    PyObject **in = slot_in(owner, slot);
    if (in != NULL && *in != NULL) return *in == Py_None;
    return attr_is_none(owner, slot->name);
}

/* owner.<name> += amount for a float field (HostTimes's sums) */
static int add_seconds(PyObject *owner, const Slot *slot, double amount) {
    PyObject **in = slot_in(owner, slot);
    if (in != NULL && *in != NULL && PyFloat_CheckExact(*in)) {
        PyObject *sum = PyFloat_FromDouble(PyFloat_AS_DOUBLE(*in) + amount);
        if (sum == NULL) return -1;
        Py_SETREF(*in, sum);
        return 0;
    }
    PyObject *name = slot->name, *now = PyObject_GetAttr(owner, name);
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

static PyTypeObject HooksType;
static PyObject *Hooks_on_commit(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

static int commit_closed(Tracker *self) {
    PyObject *closed = self->closed;
    if (is_none(closed)) return 0;
    self->closed = Py_None;
    Py_INCREF(Py_None);
    PyObject *on = self->on_commit, *r; /* the compiled hook's bound on_commit: called without a call's work */
    if (on != NULL && PyCFunction_Check(on) && PyCFunction_GET_SELF(on) != NULL &&
        Py_TYPE(PyCFunction_GET_SELF(on)) == &HooksType &&
        ((PyCFunctionObject *)on)->m_ml->ml_meth == (PyCFunction)(void (*)(void))Hooks_on_commit)
        r = Hooks_on_commit(PyCFunction_GET_SELF(on), &closed, 1);
    else
        r = PyObject_CallOneArg(on, closed);
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

/* ---- the log step: LogWindows.close and _write (runtime/log_windows.py) for a plain window on the host ---------
 *
 * A plain window: the line is due and no read is pending, one optimizer's losses (plain host tensors, no step
 * without one), no torch function or dispatch mode and no profiler recording, and the sinks log.txt (not echoed)
 * and metrics.jsonl. The features that read along (health's gradient norms) are called as LogWindows calls them,
 * their values read on the host (elsewhere: LogWindows.read takes the window over). The step is a write in
 * progress (`with outputs`); it is marked as the monitor's own work (`with INTERNAL`) where something could see
 * that work: features that read along, or a Tensor.item wrapped in Python (torch's own, called from here with no
 * mode, subclass or profiler about, nothing sees). Its two lines are formatted here (`lines`: the bytes of
 * sinks.metrics_line and format_log_line) and each written in one write(2), as LineFile.write does. A value the
 * fast line would not write as json does (a non-finite number, a dict, another type) or a time stamp
 * log_line.stamp could not make: the window is still made here, and written by LogWindows.write in Python. */

static PyObject *log_windows_type, *step_clock_type, *text_sink_type, *jsonl_sink_type, *window_type, *make_window,
    *profiler_enabled, *len_dispatch_stack, *stamp_cache, *builtin_sum, *floats_of, *stamp_of;
static PyObject *no_riders; /* (None, ()): read_along's (extra, layout) where no feature reads along */
/* StepClock's and LogWindows' fields the log step reads (found by setup_lines) */
static Slot clock_commit, clock_entries, clock_window_start;
static Slot windows_pending, windows_device, windows_sinks, windows_host, windows_totals, windows_rank,
    windows_world_size, windows_steady_from;
/* the sinks', their files' and the outputs' (found by setup_lines) */
static Slot text_file, text_echo, jsonl_file, file_fd, outputs_busy_count, outputs_deferred;
static PyObject *line_file_type, *outputs_type;
static PyObject *s_callbacks, *s_riders, *s_sinks, *s_device, *s_kind, *s_entries, *s_window_start, *s_outputs,
    *s_busy, *s_deferred, *s_run_deferred, *s_item, *s_is_cpu, *s_echo, *s_file, *s_fd, *s_fail, *s_totals,
    *s_epoch, *s_rank, *s_world_size, *s_steady_from, *s_host, *s_write, *s_window_list, *s_ctx, *s_read_along,
    *s_read, *s_window, *s_dim, *s_is_floating_point;

/* a line's bytes: in the buffer's own room (a line with a feature's long fields: on the heap) */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char room[1024];
} Buf;

static void buf_init(Buf *b) {
    b->p = b->room;
    b->n = 0;
    b->cap = sizeof b->room;
}

static void buf_free(Buf *b) {
    if (b->p != b->room) PyMem_Free(b->p);
}

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (b->n + n > b->cap) {
        Py_ssize_t cap = (b->n + n) * 2;
        char *p = b->p == b->room ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (b->p == b->room) memcpy(p, b->room, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int buf_text(Buf *b, const char *s) { return buf_put(b, s, (Py_ssize_t)strlen(s)); }

/* the `n` bytes written at `at` once more (a float's repr: 24 bytes at most; copied first, as the buffer may move) */
static int buf_again(Buf *b, Py_ssize_t at, Py_ssize_t n) {
    char copy[32];
    if (n > (Py_ssize_t)sizeof copy) {
        PyErr_SetString(PyExc_SystemError, "a float's repr longer than 32 bytes");
        return -1;
    }
    memcpy(copy, b->p + at, n);
    return buf_put(b, copy, n);
}

/* float.__repr__ of a double of the fixed-point range, from its bits with 128-bit integers (Python's dtoa costs
   ~8k instructions a 17-digit loss, its bignums; this ~0.8k, buf_float's whole call). The text is the
   shortest decimal that reads back as the double, the closest of those to it, ties to an even last digit (dtoa's
   mode 0); where none is in [1e-4, 2^53) or this compiler has no 128-bit integer: 0, and dtoa writes it. */
#if defined(__SIZEOF_INT128__)
typedef unsigned __int128 u128;

static const unsigned long long P10[20] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL,
    10000000ULL, 100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
    10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL};

static u128 pow10_128(int k) { return k < 20 ? (u128)P10[k] : (u128)P10[19] * P10[k - 19]; }

/* Whether a decimal of `n` significant digits reads back as the double: `s17` its 17 leading digits (floor), `x4`
   the double scaled by 10^k in units of 2^-shift, `low` / `high` its rounding interval's half widths below and above
   in those units (`edges`: the edges read back as it, an even mantissa). `*digits`: the closest such decimal. */
static int fits(unsigned long long s17, u128 x4, int shift, u128 low, u128 high, int edges, int n,
                unsigned long long *digits) {
    unsigned long long p = P10[17 - n], q = s17 / p;
    u128 below = x4 - (((u128)q * p) << shift), above = ((u128)p << shift) - below;
    int down = edges ? below <= low : below < low, up = edges ? above <= high : above < high;
    if (!down && !up) return 0;
    *digits = q + (down && up ? above < below || (above == below && (q & 1)) : up);
    return 1;
}

static int short_repr(double v, char *out) {
    double a = fabs(v);
    if (!(a >= 1e-4 && a < 9007199254740992.0)) return 0;
    unsigned long long bits;
    memcpy(&bits, &v, sizeof bits);
    int exponent = (int)((bits >> 52) & 0x7ff), sh = 1075 - exponent; /* a = m * 2^-sh, 0 <= sh <= 66 here */
    unsigned long long fraction = bits & ((1ULL << 52) - 1), m = fraction | (1ULL << 52), s17 = 0;
    /* a * 10^k in [10^16, 10^17): log10(a) from the binary exponent is low by at most one, corrected below */
    int k = 16 - (int)floor((exponent - 1023) * 0.30102999566398120);
    u128 x = 0;
    for (int tries = 0;; tries++) {
        if (k < 0 || k > 21 || tries > 2) return 0;
        x = (u128)m * pow10_128(k);
        u128 whole = x >> sh;
        if (whole < P10[16]) k++;
        else if (whole >= P10[17]) k--;
        else {
            s17 = (unsigned long long)whole;
            break;
        }
    }
    u128 half = pow10_128(k) * 2; /* half an ulp, in units of 2^(sh+2) */
    u128 low = fraction == 0 && exponent > 1 ? half / 2 : half; /* a power of two: the double below is nearer */
    int edges = (m & 1) == 0, n = 17, lo = 1;
    unsigned long long digits, fewer;
    if (!fits(s17, x << 2, sh + 2, low, half, edges, 17, &digits)) return 0;
    /* the fewest digits (any that fit, fit with one more): a double's interval spans ~1-22 units of its 17th digit,
       so 16 or 17 digits, tried first; fewer only for a short decimal, searched in halves */
    while (n > 15 && fits(s17, x << 2, sh + 2, low, half, edges, n - 1, &fewer)) {
        n--;
        digits = fewer;
    }
    if (n == 15) {
        while (lo < n) {
            int mid = (lo + n) / 2;
            if (fits(s17, x << 2, sh + 2, low, half, edges, mid, &fewer)) {
                n = mid;
                digits = fewer;
            } else {
                lo = mid + 1;
            }
        }
    }
    int point = 17 - k; /* the decimal point after this many digits */
    if (digits == P10[n]) { /* rounded up to a power of ten */
        digits = 1;
        n = 1;
        point++;
    }
    while (n > 1 && digits % 10 == 0) {
        digits /= 10;
        n--;
    }
    if (point <= -4 || point > 16) return 0; /* repr's exponent form */
    char text[20], *o = out;
    for (int i = n - 1; i >= 0; i--, digits /= 10) text[i] = (char)('0' + digits % 10);
    if (v < 0) *o++ = '-';
    if (point <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -point; i++) *o++ = '0';
        memcpy(o, text, n);
        o += n;
    } else if (point >= n) {
        memcpy(o, text, n);
        o += n;
        for (int i = 0; i < point - n; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, text, point);
        o += point;
        *o++ = '.';
        memcpy(o, text + point, n - point);
        o += n - point;
    }
    *o = '\0';
    return (int)(o - out);
}

/* '%.<digits>f' % v for 1 <= digits <= 9, from its bits: the double times 10^digits rounded to an integer, ties
   (exact in binary) to an even one, as dtoa rounds it; 0 where that integer passes 64 bits or the double is
   subnormal (or zero), and dtoa writes it. The log line's two floats (Python's dtoa in mode 3: ~0.8k instructions
   each, and its code cold at every line). */
static int fixed_text(double v, int digits, char *out) {
    unsigned long long bits;
    memcpy(&bits, &v, sizeof bits);
    int exponent = (int)((bits >> 52) & 0x7ff), sh = 1075 - exponent; /* |v| = m * 2^-sh */
    if (exponent == 0 || exponent == 0x7ff || digits < 1 || digits > 9 || sh < -10 || sh > 127) return 0;
    unsigned long long m = (bits & ((1ULL << 52) - 1)) | (1ULL << 52), whole, part;
    if (sh <= 0) { /* an integer below 2^63 */
        whole = m << -sh;
        part = 0;
    } else {
        u128 x = (u128)m * P10[digits], q = x >> sh, rest = x - (q << sh), half = (u128)1 << (sh - 1);
        q += rest > half || (rest == half && (q & 1));
        if (q >> 64) return 0;
        whole = (unsigned long long)q / P10[digits];
        part = (unsigned long long)q % P10[digits];
    }
    char text[32], *p = text + sizeof text;
    for (int i = 0; i < digits; i++, part /= 10) *--p = (char)('0' + part % 10);
    *--p = '.';
    do {
        *--p = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    if (v < 0) *--p = '-';
    int n = (int)(text + sizeof text - p);
    memcpy(out, p, n);
    out[n] = '\0';
    return n;
}
#else
static int short_repr(double v, char *out) { return 0; }
static int fixed_text(double v, int digits, char *out) { return 0; }
#endif

/* a float as float.__repr__ writes it ('r') or as '%.<digits>f' does ('f'); 0 when not an exact finite float */
static int buf_float(Buf *b, PyObject *o, char how, int digits) {
    if (!PyFloat_CheckExact(o) || !isfinite(PyFloat_AS_DOUBLE(o))) return 0;
    char quick[32];
    double v = PyFloat_AS_DOUBLE(o);
    int length = how == 'r' ? short_repr(v, quick) : fixed_text(v, digits, quick);
    if (length > 0) return buf_put(b, quick, length) < 0 ? -1 : 1;
    char *s = PyOS_double_to_string(v, how, digits, how == 'r' ? Py_DTSF_ADD_DOT_0 : 0, NULL);
    if (s == NULL) return -1;
    int r = buf_text(b, s) < 0 ? -1 : 1;
    PyMem_Free(s);
    return r;
}

/* `v` as %d writes it, zero-padded to `width` digits and sign (no printf: its parser costs more than the digits) */
static int buf_digits(Buf *b, long long v, int width) {
    char s[32], *end = s + sizeof s, *p = end;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (end - p < width - (v < 0)) *--p = '0';
    if (v < 0) *--p = '-';
    return buf_put(b, p, end - p);
}

/* an exact int as %d writes it (zero-padded to `width`); 0 for another type or one past long long */
static int buf_int(Buf *b, PyObject *o, int width) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    if (v == -1 && PyErr_Occurred()) return -1;
    return buf_digits(b, v, width) < 0 ? -1 : 1;
}

#define PUT(call) do { int r_ = (call); if (r_ <= 0) return r_; } while (0)
#define TEXT(s) PUT(buf_put(b, "" s, (Py_ssize_t)sizeof(s) - 1) < 0 ? -1 : 1) /* a literal's bytes */

/* a field's value as sinks._value writes it (json's bytes) for None, bools, ints, finite floats and lists or
   tuples of them; 0 for anything else (a dict, a string, a NaN: Python writes the line) */
static int buf_value(Buf *b, PyObject *v, int depth) {
    if (v == Py_None) return buf_text(b, "null") < 0 ? -1 : 1;
    if (v == Py_True || v == Py_False) return buf_text(b, v == Py_True ? "true" : "false") < 0 ? -1 : 1;
    if (PyLong_CheckExact(v)) return buf_int(b, v, 0);
    if (PyFloat_CheckExact(v)) return buf_float(b, v, 'r', 0);
    if ((!PyList_CheckExact(v) && !PyTuple_CheckExact(v)) || depth > 8) return 0;
    PyObject *items = PySequence_Fast(v, "a list");
    if (items == NULL) return -1;
    int r = buf_text(b, "[") < 0 ? -1 : 1;
    for (Py_ssize_t i = 0; r == 1 && i < PySequence_Fast_GET_SIZE(items); i++) {
        if (i && buf_text(b, ",") < 0) r = -1;
        else r = buf_value(b, PySequence_Fast_GET_ITEM(items, i), depth + 1);
    }
    Py_DECREF(items);
    return r == 1 ? (buf_text(b, "]") < 0 ? -1 : 1) : r;
}

/* the fields of window_record and the monitor's own context: a feature's field of one of these names takes the
   record's place in json, not the end of the line */
static const char *record_keys[] = {"step", "loss", "steps_per_sec", "samples_per_sec", "time", "first_step",
                                    "window_steps", "seconds", "samples", "step_losses", "nonfinite", "skipped",
                                    "epoch", "rank", "world_size", "warmup", "memory_mib", "host_s"};

/* `,"key":value` for each field a feature adds (sinks._fields): plain keys only (printable ASCII without a quote or
   a backslash, none of the record's); 0 where json would write them otherwise */
static int buf_fields(Buf *b, PyObject *fields) {
    if (fields == NULL || fields == Py_None) return 1;
    if (!PyDict_CheckExact(fields)) return 0;
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(fields, &at, &key, &value)) {
        Py_ssize_t size;
        const char *name = PyUnicode_CheckExact(key) && PyUnicode_IS_ASCII(key) ? PyUnicode_AsUTF8AndSize(key, &size)
                                                                                  : NULL;
        if (name == NULL) return PyErr_Occurred() ? -1 : 0;
        for (Py_ssize_t i = 0; i < size; i++)
            if (name[i] < 0x20 || name[i] > 0x7e || name[i] == '"' || name[i] == '\\') return 0;
        for (size_t i = 0; i < sizeof record_keys / sizeof record_keys[0]; i++)
            if (strcmp(name, record_keys[i]) == 0) return 0;
        TEXT(",\"");
        PUT(buf_put(b, name, size) < 0 ? -1 : 1);
        TEXT("\":");
        PUT(buf_value(b, value, 0));
    }
    return 1;
}

/* sinks.metrics_line(window, context) for the monitor's own context, memory None: 1 written, 0 not plain */
static int metrics_bytes(Buf *b, PyObject *w, PyObject *epoch, PyObject *rank, PyObject *world, int warmup,
                         PyObject *data, PyObject *backward, PyObject *fields) {
    PyObject *losses = PyTuple_GET_ITEM(w, 4), *sps = PyTuple_GET_ITEM(w, 10), *samples = PyTuple_GET_ITEM(w, 3);
    if (!PyTuple_CheckExact(losses) || PyTuple_GET_SIZE(losses) == 0) return 0;
    TEXT("{\"step\":"); PUT(buf_int(b, PyTuple_GET_ITEM(w, 1), 0));
    TEXT(",\"loss\":");
    Py_ssize_t loss_at = b->n;
    PUT(buf_float(b, PyTuple_GET_ITEM(w, 7), 'r', 0));
    Py_ssize_t loss_size = b->n - loss_at;
    TEXT(",\"steps_per_sec\":"); PUT(buf_float(b, PyTuple_GET_ITEM(w, 9), 'r', 0));
    TEXT(",\"samples_per_sec\":");
    if (sps == Py_None) TEXT("null"); else PUT(buf_float(b, sps, 'r', 0));
    TEXT(",\"time\":"); PUT(buf_float(b, PyTuple_GET_ITEM(w, 6), 'r', 0));
    TEXT(",\"first_step\":"); PUT(buf_int(b, PyTuple_GET_ITEM(w, 0), 0));
    TEXT(",\"window_steps\":"); PUT(buf_digits(b, PyTuple_GET_SIZE(losses), 0) < 0 ? -1 : 1);
    TEXT(",\"seconds\":"); PUT(buf_float(b, PyTuple_GET_ITEM(w, 2), 'r', 0));
    TEXT(",\"samples\":");
    if (samples == Py_None) TEXT("null"); else PUT(buf_int(b, samples, 0));
    TEXT(",\"step_losses\":[");
    if (PyTuple_GET_SIZE(losses) == 1) /* the loss itself, as written above */
        PUT(buf_again(b, loss_at, loss_size) < 0 ? -1 : 1);
    else
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(losses); i++) {
            if (i) TEXT(",");
            PUT(buf_float(b, PyTuple_GET_ITEM(losses, i), 'r', 0));
        }
    TEXT("],\"nonfinite\":"); PUT(buf_int(b, PyTuple_GET_ITEM(w, 8), 0));
    TEXT(",\"skipped\":"); PUT(buf_int(b, PyTuple_GET_ITEM(w, 5), 0));
    TEXT(",\"epoch\":"); PUT(buf_int(b, epoch, 0));
    TEXT(",\"rank\":"); PUT(buf_int(b, rank, 0));
    TEXT(",\"world_size\":"); PUT(buf_int(b, world, 0));
    if (warmup) TEXT(",\"warmup\":true");
    else TEXT(",\"warmup\":false");
    TEXT(",\"memory_mib\":null,\"host_s\":{\"data\":"); PUT(buf_float(b, data, 'r', 0));
    TEXT(",\"backward\":"); PUT(buf_float(b, backward, 'r', 0));
    TEXT("}");
    PUT(buf_fields(b, fields));
    TEXT("}\n");
    return 1;
}

/* format_log_line(...) + "\n" (formats/log_line.py): the time stamp from log_line's cache, or from log_line.stamp
   in a new second (which caches it) */
static int text_bytes(Buf *b, PyObject *w) {
    PyObject *when = PyTuple_GET_ITEM(w, 6);
    if (!PyList_CheckExact(stamp_cache) || PyList_GET_SIZE(stamp_cache) != 2 || !PyFloat_CheckExact(when)) return 0;
    double t = PyFloat_AS_DOUBLE(when);
    if (!(fabs(t) < 1e15)) return 0;
    PyObject *second = PyList_GET_ITEM(stamp_cache, 0), *stamp = PyList_GET_ITEM(stamp_cache, 1), *made = NULL;
    int cached = 0, overflow = 0;
    if (PyLong_CheckExact(second) && PyUnicode_CheckExact(stamp)) {
        long long s = PyLong_AsLongLongAndOverflow(second, &overflow);
        if (s == -1 && PyErr_Occurred()) return -1;
        cached = !overflow && s == (long long)t;
    }
    if (!cached) { /* int(when) in a new second: its stamp made by log_line.stamp, which caches it */
        if (is_none(stamp_of)) return 0;
        PyObject *whole = PyLong_FromLongLong((long long)t);
        made = whole ? PyObject_CallOneArg(stamp_of, whole) : NULL;
        Py_XDECREF(whole);
        if (made == NULL) { /* Python's own line meets the error again, where it is handled */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
            PyErr_Clear();
            return 0;
        }
        if (!PyUnicode_CheckExact(made)) {
            Py_DECREF(made);
            return 0;
        }
        stamp = made;
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(stamp, &size);
    if (text == NULL || buf_text(b, "[") < 0 || buf_put(b, text, size) < 0) {
        Py_XDECREF(made);
        return -1;
    }
    Py_XDECREF(made);
    TEXT("] (step="); PUT(buf_int(b, PyTuple_GET_ITEM(w, 1), 7));
    TEXT(") Train Loss: "); PUT(buf_float(b, PyTuple_GET_ITEM(w, 7), 'f', 4));
    TEXT(", Train Steps/Sec: "); PUT(buf_float(b, PyTuple_GET_ITEM(w, 9), 'f', 2));
    TEXT("\n");
    return 1;
}

/* both lines of a window: 1 (made), 0 (not plain: Python writes them), -1 error */
static int lines(PyObject *w, PyObject *epoch, PyObject *rank, PyObject *world, int warmup, PyObject *data,
                 PyObject *backward, PyObject *fields, Buf *metrics, Buf *text) {
    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 11) return 0;
    int r = metrics_bytes(metrics, w, epoch, rank, world, warmup, data, backward, fields);
    return r <= 0 ? r : text_bytes(text, w);
}

/* plain_lines(window, epoch, rank, world_size, warmup, data, backward, fields=None): (metrics.jsonl's line,
   log.txt's) as bytes, or None where Python writes them (the test of the two formatters) */
static PyObject *plain_lines(PyObject *module, PyObject *args) {
    PyObject *w, *epoch, *rank, *world, *data, *backward, *fields = Py_None;
    int warmup;
    if (!PyArg_ParseTuple(args, "OOOOpOO|O:plain_lines", &w, &epoch, &rank, &world, &warmup, &data, &backward,
                          &fields))
        return NULL;
    Buf metrics, text;
    buf_init(&metrics);
    buf_init(&text);
    int r = lines(w, epoch, rank, world, warmup, data, backward, fields, &metrics, &text);
    PyObject *out = r < 0 ? NULL : r == 0 ? Py_NewRef(Py_None)
        : Py_BuildValue("(y#y#)", metrics.p, metrics.n, text.p, text.n);
    buf_free(&metrics);
    buf_free(&text);
    return out;
}

/* LineFile.write (contract/outputs.py): one write(2); a short one's torn part taken back; a failure is the
   file's (its _fail: the output is switched off, the run goes on) */
static int write_line(PyObject *sink, Buf *b) {
    PyObject *file = slot_get(sink, Py_TYPE(sink) == (PyTypeObject *)text_sink_type ? &text_file : &jsonl_file);
    PyObject *fd_obj = file ? slot_get(file, &file_fd) : NULL;
    if (fd_obj == NULL || fd_obj == Py_None) {
        Py_XDECREF(fd_obj);
        Py_XDECREF(file);
        return fd_obj == NULL ? -1 : 0; /* None: a failed file drops its lines */
    }
    int fd = PyLong_AsLong(fd_obj);
    Py_DECREF(fd_obj);
    if (fd == -1 && PyErr_Occurred()) {
        Py_DECREF(file);
        return -1;
    }
    Py_ssize_t written;
    int err;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        written = write(fd, b->p, (size_t)b->n);
        err = errno;
        Py_END_ALLOW_THREADS
        if (written >= 0 || err != EINTR) break;
        if (PyErr_CheckSignals() < 0) { /* os.write's way: a signal handler's exception is raised */
            Py_DECREF(file);
            return -1;
        }
    }
    PyObject *exc = NULL;
    if (written < 0) {
        exc = PyObject_CallFunction(PyExc_OSError, "is", err, strerror(err));
    } else if (written != b->n) { /* the disk filled inside this line */
        struct stat st;
        if (fstat(fd, &st) == 0) (void)!ftruncate(fd, st.st_size - written);
        exc = PyObject_CallFunction(PyExc_OSError, "is", ENOSPC, strerror(ENOSPC));
    } else {
        Py_DECREF(file);
        return 0;
    }
    PyObject *r = exc ? PyObject_CallMethodOneArg(file, s_fail, exc) : NULL;
    Py_XDECREF(exc);
    Py_DECREF(file);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* whether the window about to close is plain (see above): 1, 0, or -1 with an error; `*sinks` and `*entries` get
   new references when 1 */
static int plain_window(PyObject *windows, PyObject *clock, PyObject **sinks, PyObject **entries) {
    int plain = 0;
    PyObject *pending = NULL, *device = NULL, *list = NULL, *out = NULL;
    *sinks = *entries = NULL;
    if ((PyObject *)Py_TYPE(windows) != log_windows_type || (PyObject *)Py_TYPE(clock) != step_clock_type) return 0;
    if ((pending = slot_get(windows, &windows_pending)) == NULL) goto done;
    if (!PyList_CheckExact(pending) || PyList_GET_SIZE(pending)) goto done;
    if ((device = slot_get(windows, &windows_device)) == NULL) goto done;
    if (device != Py_None) {
        PyObject *kind = PyObject_GetAttr(device, s_kind);
        if (kind == NULL) goto done;
        int cpu = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "cpu") == 0;
        Py_DECREF(kind);
        if (!cpu) goto done;
    }
    PyObject *callables[] = {len_function_stack, len_dispatch_stack, profiler_enabled};
    for (int i = 0; i < 3; i++) {
        if (callables[i] == NULL || callables[i] == Py_None) goto done; /* a torch without it: unknown */
        PyObject *v = PyObject_CallNoArgs(callables[i]);
        if (v == NULL) goto done;
        int on = truth(v);
        Py_DECREF(v);
        if (on) goto done; /* a mode would see our reads, a profiler wants them annotated: the Python path */
    }
    if ((list = slot_get(windows, &windows_sinks)) == NULL) goto done;
    if (!PyList_CheckExact(list)) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *sink = PyList_GET_ITEM(list, i), *type = (PyObject *)Py_TYPE(sink);
        if (type == text_sink_type) {
            PyObject *echo = slot_get(sink, &text_echo);
            if (echo == NULL) goto done;
            int shown = truth(echo);
            Py_DECREF(echo);
            if (shown) goto done; /* the console's line goes through logging: Python's */
        } else if (type != jsonl_sink_type) {
            goto done;
        }
    }
    if ((out = slot_get(clock, &clock_entries)) == NULL) goto done;
    if (!PyList_CheckExact(out) || PyList_GET_SIZE(out) == 0) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) {
        Closed *e = (Closed *)PyList_GET_ITEM(out, i);
        if (Py_TYPE(e) != &ClosedType || truth(e->losses) != 0 || e->loss == NULL ||
            (PyObject *)Py_TYPE(e->loss) != tensor_type || !PyFloat_CheckExact(e->at))
            goto done;
        PyObject *cpu = PyObject_GetAttr(e->loss, s_is_cpu);
        if (cpu == NULL) goto done;
        int host = cpu == Py_True;
        Py_DECREF(cpu);
        if (!host) goto done;
    }
    plain = 1;
    *sinks = Py_NewRef(list);
    *entries = Py_NewRef(out);
done:
    Py_XDECREF(pending); Py_XDECREF(device); Py_XDECREF(list);
    Py_XDECREF(out);
    return PyErr_Occurred() ? -1 : plain;
}

/* step_clock.make_window for host floats (each value an exact float): the same Window, the same sums */
static PyObject *window_of(PyObject *entries, PyObject *seconds, PyObject *samples, PyObject *values) {
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyFloat_CheckExact(PyList_GET_ITEM(values, i)))
            return PyObject_CallFunctionObjArgs(make_window, entries, seconds, samples, values, NULL);
    Closed *first = (Closed *)PyList_GET_ITEM(entries, 0), *last = (Closed *)PyList_GET_ITEM(entries, n - 1);
    int timed = PyFloat_AS_DOUBLE(seconds) > 0;
    PyObject *sps = NULL, *rate = NULL, *skipped = NULL, *losses = NULL, *loss = NULL, *count = NULL;
    PyObject *nonfinite = NULL, *w = NULL;
    sps = samples == Py_None || !timed ? Py_NewRef(Py_None) : PyNumber_TrueDivide(samples, seconds);
    if (sps == NULL || (count = PyLong_FromSsize_t(n)) == NULL) goto done;
    rate = timed ? PyNumber_TrueDivide(count, seconds) : PyFloat_FromDouble(Py_HUGE_VAL);
    if (rate == NULL || (losses = PyList_AsTuple(values)) == NULL) goto done;
    long bad = 0, skips = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        bad += !isfinite(PyFloat_AS_DOUBLE(PyList_GET_ITEM(values, i)));
        int s = truth(((Closed *)PyList_GET_ITEM(entries, i))->skipped);
        if (s < 0) goto done;
        skips += s;
    }
    if (n == 1) {
        loss = Py_NewRef(PyList_GET_ITEM(values, 0));
        skipped = PyNumber_Long(first->skipped);
    } else {
        PyObject *sum = PyObject_CallOneArg(builtin_sum, values); /* Python's own float sum */
        loss = sum ? PyNumber_TrueDivide(sum, count) : NULL;
        Py_XDECREF(sum);
        skipped = PyLong_FromLong(skips);
    }
    if (loss == NULL || skipped == NULL || (nonfinite = PyLong_FromLong(bad)) == NULL) goto done;
    PyObject *items = PyTuple_Pack(11, first->step, last->step, seconds, samples, losses, skipped, last->wall, loss,
                                   nonfinite, rate, sps);
    PyObject *args = items ? PyTuple_Pack(1, items) : NULL;
    Py_XDECREF(items);
    w = args ? PyTuple_Type.tp_new((PyTypeObject *)window_type, args, NULL) : NULL; /* tuple.__new__(Window, ..) */
    Py_XDECREF(args);
done:
    Py_XDECREF(sps); Py_XDECREF(rate); Py_XDECREF(skipped); Py_XDECREF(losses); Py_XDECREF(loss);
    Py_XDECREF(count); Py_XDECREF(nonfinite);
    return w;
}

/* the window's lines written to the sinks: made here, or by LogWindows.write where not plain */
static int write_window(PyObject *windows, PyObject *sinks, PyObject *w, PyObject *epoch, PyObject *host,
                        PyObject *fields) {
    if (PyList_GET_SIZE(sinks) == 0) return 0;
    int r = -1, warmup = -1;
    PyObject *rank = slot_get(windows, &windows_rank);
    PyObject *world = rank ? slot_get(windows, &windows_world_size) : NULL;
    PyObject *steady = world ? slot_get(windows, &windows_steady_from) : NULL;
    if (steady) warmup = PyObject_RichCompareBool(PyTuple_GET_ITEM(w, 0), steady, Py_LT);
    Buf metrics, text;
    buf_init(&metrics);
    buf_init(&text);
    if (warmup >= 0) {
        r = lines(w, epoch, rank, world, warmup, PyTuple_GET_ITEM(host, 0), PyTuple_GET_ITEM(host, 1), fields,
                  &metrics, &text);
    }
    if (r == 1) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sinks) && r == 1; i++) {
            PyObject *sink = PyList_GET_ITEM(sinks, i);
            r = write_line(sink, (PyObject *)Py_TYPE(sink) == text_sink_type ? &text : &metrics) < 0 ? -1 : 1;
        }
    } else if (r == 0) {
        PyObject *taken = Py_BuildValue("{sOsO}", "data", PyTuple_GET_ITEM(host, 0), "backward",
                                        PyTuple_GET_ITEM(host, 1));
        PyObject *more = fields ? fields : Py_None;
        PyObject *done = taken ? PyObject_CallMethodObjArgs(windows, s_write, w, epoch, taken, more, NULL) : NULL;
        Py_XDECREF(taken);
        r = done ? 1 : -1;
        Py_XDECREF(done);
    }
    buf_free(&metrics);
    buf_free(&text);
    Py_XDECREF(rank); Py_XDECREF(world); Py_XDECREF(steady);
    return r < 0 ? -1 : 0;
}

/* HostTimes.take: (data, backward), both reset (`slots`: where they lie in a HostTimes) */
static PyObject *take_host(PyObject *windows, const Slot *data_slot, const Slot *backward_slot) {
    PyObject *host = slot_get(windows, &windows_host);
    if (host == NULL) return NULL;
    PyObject *data = slot_get(host, data_slot);
    PyObject *backward = data ? slot_get(host, backward_slot) : NULL;
    PyObject *zero = backward ? PyFloat_FromDouble(0.0) : NULL;
    PyObject *out = NULL;
    if (zero && slot_set(host, data_slot, zero) == 0 && slot_set(host, backward_slot, zero) == 0)
        out = PyTuple_Pack(2, data, backward);
    Py_XDECREF(zero); Py_XDECREF(data); Py_XDECREF(backward); Py_DECREF(host);
    return out;
}

/* `with outputs:` (contract/outputs.py's __enter__ / __exit__): busy while the lines are written; what a SIGTERM
   deferred meanwhile runs at the end */
static int outputs_busy(PyObject *outputs, long by) {
    PyObject *busy = slot_get(outputs, &outputs_busy_count);
    if (busy == NULL) return -1;
    long now = PyLong_AsLong(busy) + by;
    Py_DECREF(busy);
    if (PyErr_Occurred()) return -1;
    PyObject *value = PyLong_FromLong(now);
    int r = value ? slot_set(outputs, &outputs_busy_count, value) : -1;
    Py_XDECREF(value);
    if (r < 0 || by > 0 || now) return r;
    PyObject *deferred = slot_get(outputs, &outputs_deferred);
    int any = deferred ? truth(deferred) : -1;
    Py_XDECREF(deferred);
    if (any != 1) return any;
    PyObject *ran = PyObject_CallMethodNoArgs(outputs, s_run_deferred);
    Py_XDECREF(ran);
    return ran ? 0 : -1;
}

/* `with INTERNAL:` (recording/frames.py): this thread's work is the monitor's own (`by`: +1 entering, -1 leaving) */
static int mark_internal(PyObject *marks, long by) {
    long depth = 0;
    PyObject *now = PyObject_GetAttr(marks, s_internal);
    if (now == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear(); /* never marked on this thread: 0 */
    } else {
        depth = PyLong_AsLong(now);
        Py_DECREF(now);
        if (PyErr_Occurred()) return -1;
    }
    PyObject *value = PyLong_FromLong(depth + by);
    int r = value ? PyObject_SetAttr(marks, s_internal, value) : -1;
    Py_XDECREF(value);
    return r;
}

/* the values the features read along with the window's losses (LogWindows.close: callbacks.read_along), read
   where they lie as step_clock._PendingRead does; `*riding` stays NULL where they are not on the host (the
   window's read is then Python's: LogWindows.read) */
static int read_riders(PyObject *extra, PyObject **riding) {
    *riding = NULL;
    if (extra == Py_None) {
        *riding = PyList_New(0);
        return *riding ? 0 : -1;
    }
    if ((PyObject *)Py_TYPE(extra) != tensor_type) return 0;
    PyObject *cpu = PyObject_GetAttr(extra, s_is_cpu);
    if (cpu == NULL) return -1;
    int host = cpu == Py_True;
    Py_DECREF(cpu);
    if (!host) return 0;
    PyObject *dim = PyObject_CallMethodNoArgs(extra, s_dim);
    PyObject *real = dim ? PyObject_CallMethodNoArgs(extra, s_is_floating_point) : NULL;
    int one = real != NULL && PyLong_CheckExact(dim) && PyLong_AsLong(dim) == 0 && real == Py_True;
    Py_XDECREF(dim);
    Py_XDECREF(real);
    if (real == NULL) return -1;
    PyObject *value = one ? PyObject_CallMethodNoArgs(extra, s_item) : NULL; /* one norm: no frame of Python's */
    if (one) {
        if (value != NULL && (*riding = PyList_New(1)) != NULL) PyList_SET_ITEM(*riding, 0, value);
        else Py_XDECREF(value);
    } else {
        *riding = PyObject_CallOneArg(floats_of, extra);
    }
    return *riding ? 0 : -1;
}

/* the monitor's hooks (below): what they hold, and where the fields they read lie */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *monitor, *tracker, *host, *original, *on_done, *graph_task, *marks, *scalar, *wrapped_name, *doc;
    PyObject *monitor_type, *host_type; /* the classes the slots below were found for */
    /* the monitor's (compiled.StepFields) */
    Slot watch, scaled, finished, log_broken, clock, log_every, windows, outputs, callbacks, ctx, epoch;
    Slot data, backward; /* the host's (HostTimes) */
} Hooks;

/* TrainingMonitor._log_due for a plain window: 1 written, 0 not plain (the Python path), -1 error */
static int plain_log_step(Hooks *self) {
    PyObject *monitor = self->monitor, *marks = self->marks;
    PyObject *windows = slot_get(monitor, &self->windows);
    PyObject *clock = windows ? slot_get(monitor, &self->clock) : NULL;
    PyObject *sinks = NULL, *entries = NULL, *outputs = NULL;
    int plain = clock ? plain_window(windows, clock, &sinks, &entries) : -1;
    if (plain == 1) outputs = slot_get(monitor, &self->outputs);
    if (plain != 1 || outputs == NULL || outputs_busy(outputs, 1) < 0) {
        Py_XDECREF(windows); Py_XDECREF(clock); Py_XDECREF(sinks); Py_XDECREF(entries); Py_XDECREF(outputs);
        return plain == 1 ? -1 : plain;
    }
    int r = -1, internal = 0;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *taken = NULL, *values = NULL, *w = NULL, *host = NULL, *totals = NULL, *start = NULL, *seconds = NULL;
    PyObject *samples = NULL, *all = NULL, *callbacks = NULL, *riders = NULL, *ctx = NULL, *along = NULL;
    PyObject *riding = NULL, *fields = NULL, *epoch = NULL;
    /* StepClock.close_window */
    if ((taken = PyList_GetSlice(entries, 0, n)) == NULL || PyList_SetSlice(entries, 0, n, NULL) < 0) goto done;
    PyObject *end = ((Closed *)PyList_GET_ITEM(taken, n - 1))->at;
    if ((start = slot_get(clock, &clock_window_start)) == NULL) goto done;
    if ((seconds = PyNumber_Subtract(end, start)) == NULL || !PyFloat_CheckExact(seconds)) goto done;
    samples = PyLong_FromLong(0);
    for (Py_ssize_t i = 0; i < n && samples != NULL && samples != Py_None; i++) {
        PyObject *s = ((Closed *)PyList_GET_ITEM(taken, i))->samples;
        Py_SETREF(samples, is_none(s) ? Py_NewRef(Py_None) : PyNumber_Add(samples, s));
    }
    if (samples == NULL || slot_set(clock, &clock_window_start, end) < 0) goto done;
    /* what the features read along: (extra, layout) */
    if ((callbacks = slot_get(monitor, &self->callbacks)) == NULL) goto done;
    if ((riders = PyObject_GetAttr(callbacks, s_riders)) == NULL || (ctx = slot_get(monitor, &self->ctx)) == NULL)
        goto done;
    int any = truth(riders);
    if (any < 0) goto done;
    if (any) { /* the features' reads are our own work: no dump or detector sees them (`with INTERNAL:`) */
        if (mark_internal(marks, 1) < 0) goto done;
        internal = 1;
    }
    along = any ? PyObject_CallMethodObjArgs(callbacks, s_read_along, ctx, taken, NULL) : Py_NewRef(no_riders);
    if (along == NULL) goto done;
    if (!PyTuple_Check(along) || PyTuple_GET_SIZE(along) != 2) {
        PyErr_SetString(PyExc_TypeError, "read_along: (extra, layout)");
        goto done;
    }
    if ((epoch = slot_get(monitor, &self->epoch)) == NULL || read_riders(PyTuple_GET_ITEM(along, 0), &riding) < 0)
        goto done;
    if (riding == NULL) { /* read on a device: LogWindows.read's */
        PyObject *args[] = {windows, taken, seconds, samples, epoch, PyTuple_GET_ITEM(along, 0),
                            PyTuple_GET_ITEM(along, 1), callbacks, ctx};
        PyObject *read = PyObject_VectorcallMethod(s_read, args, 9, NULL); /* args[0]: self */
        r = read ? 1 : -1;
        Py_XDECREF(read);
        goto done;
    }
    /* the reads: each loss as .item() gives it, where it lies. torch's own item (a C method), called from here with
       no mode, subclass or profiler about, nothing sees; one wrapped in Python (a dump's, a test's count) sees
       them marked as our own work */
    PyObject *item = PyObject_GetAttr((PyObject *)Py_TYPE(((Closed *)PyList_GET_ITEM(taken, 0))->loss), s_item);
    int wrapped = item == NULL ? -1 : Py_TYPE(item) != &PyMethodDescr_Type;
    Py_XDECREF(item);
    if (wrapped < 0 || (wrapped && !internal && mark_internal(marks, 1) < 0)) goto done;
    internal = internal || wrapped;
    if ((values = PyList_New(n)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyObject_CallMethodNoArgs(((Closed *)PyList_GET_ITEM(taken, i))->loss, s_item);
        if (v == NULL) goto done;
        PyList_SET_ITEM(values, i, v);
    }
    if ((host = take_host(windows, &self->data, &self->backward)) == NULL) goto done;
    if ((w = window_of(taken, seconds, samples, values)) == NULL) goto done;
    totals = slot_get(windows, &windows_totals);
    all = totals ? PyObject_GetAttr(totals, s_window_list) : NULL;
    if (all == NULL || PyList_Append(all, w) < 0) goto done;
    int shown = truth(PyTuple_GET_ITEM(along, 1)); /* callbacks.window(ctx, window, riding, layout) if layout */
    if (shown < 0) goto done;
    if (shown && (fields = PyObject_CallMethodObjArgs(callbacks, s_window, ctx, w, riding, PyTuple_GET_ITEM(along, 1),
                                                      NULL)) == NULL)
        goto done;
    r = write_window(windows, sinks, w, epoch, host, fields) < 0 ? -1 : 1;
done:
    Py_XDECREF(taken); Py_XDECREF(values); Py_XDECREF(w); Py_XDECREF(host); Py_XDECREF(totals);
    Py_XDECREF(start); Py_XDECREF(seconds); Py_XDECREF(samples); Py_XDECREF(all); Py_XDECREF(callbacks);
    Py_XDECREF(riders); Py_XDECREF(ctx); Py_XDECREF(along); Py_XDECREF(riding); Py_XDECREF(fields);
    Py_XDECREF(epoch);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* the blocks' ends run whatever ended them, and that error goes on */
    if ((internal && mark_internal(marks, -1) < 0) | (outputs_busy(outputs, -1) < 0)) {
        r = -1;
        if (type != NULL) PyErr_Clear();
    }
    if (type != NULL) PyErr_Restore(type, value, tb);
    Py_DECREF(windows); Py_DECREF(clock); Py_DECREF(sinks); Py_DECREF(entries); Py_DECREF(outputs);
    return r;
}

/* ---- the monitor's hooks: backward (capture.patch_backward + TrainingMonitor._on_backward), the batch
   (TrainingMonitor._on_batch), the commit (TrainingMonitor._on_commit) --------------------------------------------- */

static int Hooks_traverse(Hooks *self, visitproc visit, void *arg) {
    Py_VISIT(self->monitor); Py_VISIT(self->tracker); Py_VISIT(self->host); Py_VISIT(self->original);
    Py_VISIT(self->on_done); Py_VISIT(self->graph_task); Py_VISIT(self->marks); Py_VISIT(self->scalar);
    Py_VISIT(self->wrapped_name); Py_VISIT(self->doc); Py_VISIT(self->monitor_type); Py_VISIT(self->host_type);
    return 0;
}

static int Hooks_clear(Hooks *self) {
    Py_CLEAR(self->monitor); Py_CLEAR(self->tracker); Py_CLEAR(self->host); Py_CLEAR(self->original);
    Py_CLEAR(self->on_done); Py_CLEAR(self->graph_task); Py_CLEAR(self->marks); Py_CLEAR(self->scalar);
    Py_CLEAR(self->wrapped_name); Py_CLEAR(self->doc); Py_CLEAR(self->monitor_type); Py_CLEAR(self->host_type);
    return 0;
}

static void Hooks_dealloc(Hooks *self) {
    PyObject_GC_UnTrack(self);
    Hooks_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* TrainingMonitor._on_backward: the loss detached and handed to the tracker; whether its end is wanted */
static int on_loss(Hooks *self, PyObject *tensor) {
    int plain = slot_is_none(self->monitor, &self->scaled);
    if (plain == 1) plain = slot_is_none(self->monitor, &self->watch);
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
    if ((ended == -1.0 && PyErr_Occurred()) || add_seconds(self->host, &self->backward, ended - began) < 0) {
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

/* TrainingMonitor._on_batch: the loop waited `w` seconds for `batch` (`waited`: those seconds as a float, or NULL
   where none is made yet) */
static PyObject *on_batch(Hooks *self, PyObject *batch, PyObject *waited, double w) {
    int plain = slot_is_none(self->monitor, &self->watch);
    if (plain != 1 || !PyObject_TypeCheck(self->tracker, &TrackerType)) {
        if (plain < 0) PyErr_Clear();
        PyObject *made = waited == NULL ? PyFloat_FromDouble(w) : Py_NewRef(waited);
        PyObject *r = made ? PyObject_CallMethodObjArgs(self->monitor, s_on_batch, batch, made, NULL) : NULL;
        Py_XDECREF(made);
        return r;
    }
    if (waited != NULL) w = PyFloat_AsDouble(waited);
    PyObject *n = NULL, *r = NULL;
    if (!(w == -1.0 && PyErr_Occurred()) && add_seconds(self->host, &self->data, w) == 0) {
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
    return on_batch(self, args[0], args[1], 0.0);
}

/* TrainingMonitor._on_commit: count the step; a log step (or a read due) goes on in Python (_log_due) */
static PyObject *Hooks_on_commit(PyObject *hooks, PyObject *const *args, Py_ssize_t nargs) {
    Hooks *self = (Hooks *)hooks;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "on_commit(closed)");
        return NULL;
    }
    PyObject *closed = args[0];
    PyObject *finished = slot_get(self->monitor, &self->finished);
    PyObject *broken = finished ? slot_get(self->monitor, &self->log_broken) : NULL;
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
    int due = -1, line = 0;
    PyObject *clock = slot_get(self->monitor, &self->clock);
    PyObject *commit = clock ? slot_get(clock, &clock_commit) : NULL;
    PyObject *r = commit ? PyObject_CallOneArg(commit, closed) : NULL;
    Py_XDECREF(clock);
    Py_XDECREF(commit);
    if (r != NULL) {
        Py_DECREF(r);
        PyObject *step = Py_TYPE(closed) == &ClosedType && ((Closed *)closed)->step != NULL
                             ? Py_NewRef(((Closed *)closed)->step) : PyObject_GetAttr(closed, s_step);
        PyObject *every = step ? slot_get(self->monitor, &self->log_every) : NULL;
        Py_ssize_t n = step ? PyLong_AsSsize_t(step) : -1, k = every ? PyLong_AsSsize_t(every) : -1;
        Py_XDECREF(step);
        Py_XDECREF(every);
        if (!PyErr_Occurred() && k > 0) {
            due = line = ((n + 1) % k + k) % k == 0; /* Python's modulo: never negative */
            if (!due) {
                PyObject *windows = slot_get(self->monitor, &self->windows);
                PyObject *pending = windows ? slot_get(windows, &windows_pending) : NULL;
                due = pending ? truth(pending) : -1;
                Py_XDECREF(pending);
                Py_XDECREF(windows);
            }
        } else if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ZeroDivisionError, "log_every must be positive");
        }
    }
    if (due == 1) {
        int written = line ? plain_log_step(self) : 0; /* a plain window's line: here */
        r = written ? NULL : PyObject_CallMethodOneArg(self->monitor, s_log_due, closed);
        if (written < 0 || (!written && r == NULL)) due = -1;
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
        self->wrapped_name = self->doc = self->monitor_type = self->host_type = NULL;
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
    self->monitor_type = Py_NewRef((PyObject *)Py_TYPE(self->monitor));
    self->host_type = Py_NewRef((PyObject *)Py_TYPE(self->host));
    struct { Slot *slot; PyObject *type, *name; } slots[] = {
        {&self->watch, self->monitor_type, s_watch}, {&self->scaled, self->monitor_type, s_scaled},
        {&self->finished, self->monitor_type, s_finished}, {&self->log_broken, self->monitor_type, s_log_broken},
        {&self->clock, self->monitor_type, s_clock}, {&self->log_every, self->monitor_type, s_log_every},
        {&self->windows, self->monitor_type, s_windows}, {&self->outputs, self->monitor_type, s_outputs},
        {&self->callbacks, self->monitor_type, s_callbacks}, {&self->ctx, self->monitor_type, s_ctx},
        {&self->epoch, self->monitor_type, s_epoch}, {&self->data, self->host_type, s_data},
        {&self->backward, self->host_type, s_backward}};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) slot_find(slots[i].slot, slots[i].type, slots[i].name);
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
    PyObject *waited = NULL; /* the seconds as a float, made where a Python function is given them */
    if (ended == -1.0 && PyErr_Occurred()) goto fail;
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
        r = on_batch((Hooks *)PyCFunction_GET_SELF(on), batch, NULL, ended - began);
    else if ((waited = PyFloat_FromDouble(ended - began)) != NULL)
        r = PyObject_CallFunctionObjArgs(on, batch, waited, NULL);
    else
        r = NULL;
    if (r == NULL) goto fail;
    Py_DECREF(r);
    Py_XDECREF(waited);
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

/* whether the clocks given are the time module's perf_counter and time, read here with clock_gettime: each
   reading of ours within a second of the function's (a Python that reads another clock: called, as any other) */
static int set_clocks(void) {
    direct_clocks = 0;
#ifdef __linux__
    PyObject *time_module = PyImport_ImportModule("time");
    if (time_module == NULL) return -1;
    PyObject *stock_perf = PyObject_GetAttrString(time_module, "perf_counter");
    PyObject *stock_wall = stock_perf ? PyObject_GetAttrString(time_module, "time") : NULL;
    Py_DECREF(time_module);
    int stock = stock_wall != NULL && stock_perf == perf_counter && stock_wall == wall_clock;
    Py_XDECREF(stock_perf);
    Py_XDECREF(stock_wall);
    if (PyErr_Occurred()) return -1;
    PyObject *clocks[] = {perf_counter, wall_clock};
    clockid_t ids[] = {CLOCK_MONOTONIC, CLOCK_REALTIME};
    for (int i = 0; i < 2 && stock; i++) {
        double theirs = seconds(clocks[i]), ours = clock_seconds(ids[i]);
        if (PyErr_Occurred()) return -1;
        stock = fabs(ours - theirs) < 1.0;
    }
    direct_clocks = stock;
#endif
    return 0;
}

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
    if (set_clocks() < 0) return NULL;
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

/* setup_lines(LogWindows, StepClock, TextLogSink, JsonlSink, Window, make_window, profiler_enabled,
   len_dispatch_stack, stamp_cache, sum, floats, stamp, LineFile, Outputs): what the log step reads and hands on
   (None: a torch without it) */
static PyObject *setup_lines(PyObject *module, PyObject *args) {
    PyObject **into[] = {&log_windows_type, &step_clock_type, &text_sink_type, &jsonl_sink_type, &window_type,
                         &make_window, &profiler_enabled, &len_dispatch_stack, &stamp_cache, &builtin_sum,
                         &floats_of, &stamp_of, &line_file_type, &outputs_type};
    const Py_ssize_t count = sizeof into / sizeof into[0];
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != count) {
        PyErr_SetString(PyExc_TypeError, "setup_lines takes 14 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) put(into[i], PyTuple_GET_ITEM(args, i));
    struct { Slot *slot; PyObject *type, *name; } slots[] = {
        {&clock_commit, step_clock_type, s_commit}, {&clock_entries, step_clock_type, s_entries},
        {&clock_window_start, step_clock_type, s_window_start}, {&windows_pending, log_windows_type, s_pending},
        {&windows_device, log_windows_type, s_device}, {&windows_sinks, log_windows_type, s_sinks},
        {&windows_host, log_windows_type, s_host}, {&windows_totals, log_windows_type, s_totals},
        {&windows_rank, log_windows_type, s_rank}, {&windows_world_size, log_windows_type, s_world_size},
        {&windows_steady_from, log_windows_type, s_steady_from}, {&text_file, text_sink_type, s_file},
        {&text_echo, text_sink_type, s_echo}, {&jsonl_file, jsonl_sink_type, s_file}, {&file_fd, line_file_type, s_fd},
        {&outputs_busy_count, outputs_type, s_busy}, {&outputs_deferred, outputs_type, s_deferred}};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) slot_find(slots[i].slot, slots[i].type, slots[i].name);
    Py_RETURN_NONE;
}

/* float_text(x, digits=0): the text a line writes for the float x: float.__repr__'s, or with digits '%.<digits>f'
   % x's */
static PyObject *float_text(PyObject *module, PyObject *args) {
    PyObject *x;
    int digits = 0;
    if (!PyArg_ParseTuple(args, "O|i:float_text", &x, &digits)) return NULL;
    if (digits < 0 || digits > 17) {
        PyErr_SetString(PyExc_ValueError, "float_text's digits: 0 to 17");
        return NULL;
    }
    Buf b;
    buf_init(&b);
    int r = buf_float(&b, x, digits ? 'f' : 'r', digits);
    PyObject *out = r == 1 ? PyUnicode_FromStringAndSize(b.p, b.n) : NULL;
    buf_free(&b);
    if (r == 0) PyErr_SetString(PyExc_ValueError, "float_text takes a finite float");
    return out;
}

static PyMethodDef module_methods[] = {
    {"float_text", float_text, METH_VARARGS, "The text a line writes for a finite float (repr's, or '%.<digits>f')."},
    {"setup", setup, METH_VARARGS, "The Python functions the compiled ones hand unusual cases to."},
    {"setup_lines", setup_lines, METH_VARARGS, "The classes and functions of the log step."},
    {"plain_lines", plain_lines, METH_VARARGS, "A window's metrics.jsonl and log.txt lines, or None."},
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
        {&s_on_backward, "_on_backward"}, {&s_on_batch, "_on_batch"}, {&s_callbacks, "_callbacks"},
        {&s_riders, "riders"}, {&s_sinks, "sinks"}, {&s_device, "device"}, {&s_kind, "kind"},
        {&s_entries, "_entries"}, {&s_window_start, "_window_start"}, {&s_outputs, "_outputs"}, {&s_busy, "busy"},
        {&s_deferred, "_deferred"}, {&s_run_deferred, "run_deferred"}, {&s_item, "item"}, {&s_is_cpu, "is_cpu"},
        {&s_echo, "_echo"}, {&s_file, "_file"}, {&s_fd, "_fd"}, {&s_fail, "_fail"}, {&s_totals, "totals"},
        {&s_epoch, "epoch"}, {&s_rank, "rank"}, {&s_world_size, "world_size"}, {&s_steady_from, "_steady_from"},
        {&s_host, "host"}, {&s_write, "write"}, {&s_window_list, "windows"}, {&s_ctx, "_ctx"},
        {&s_read_along, "read_along"}, {&s_read, "read"}, {&s_window, "window"}, {&s_dim, "dim"},
        {&s_is_floating_point, "is_floating_point"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    PyObject *nothing = PyTuple_New(0);
    no_riders = nothing ? PyTuple_Pack(2, Py_None, nothing) : NULL;
    Py_XDECREF(nothing);
    if (no_riders == NULL) return NULL;
    struct { Slot *slot; PyObject *name; } by_name[] = { /* by name until setup_lines finds the slots */
        {&clock_commit, s_commit}, {&clock_entries, s_entries}, {&clock_window_start, s_window_start},
        {&windows_pending, s_pending}, {&windows_device, s_device}, {&windows_sinks, s_sinks},
        {&windows_host, s_host}, {&windows_totals, s_totals}, {&windows_rank, s_rank},
        {&windows_world_size, s_world_size}, {&windows_steady_from, s_steady_from}, {&text_file, s_file},
        {&text_echo, s_echo}, {&jsonl_file, s_file}, {&file_fd, s_fd}, {&outputs_busy_count, s_busy},
        {&outputs_deferred, s_deferred}};
    for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++) by_name[i].slot->name = by_name[i].name;
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
