/* One pass over the GPU ops in start order, per group of rows (a range, a stream, a (cycle, phase)): the
 * running maximum of the ends before each row, and the length of the union of each group's intervals.
 *
 * Why: both are a sort by group then a scan in polars (a stable sort of 11 M packed keys per union); in
 * start order, one pass that keeps each group's latest end in an array indexed by the group's key does the
 * same in O(rows), without a sort. analyzer/core/accounting.py calls it where it is built and the keys are dense
 * enough for such an array, and keeps its polars path otherwise; tests/test_summary.py checks the two agree.
 *
 * Python API (module analyzer._scan):
 *   groups(keys, starts, ends, lo, span, want_prev[, flags]) -> (capsule, capsule or None)
 *       keys, starts, ends: Arrow C stream capsules of int64 columns of one chunk each, the same length,
 *           rows in start order; starts and ends without nulls; every key in [lo, lo + span), or null or
 *           negative: a row of no group, left out.
 *       flags: optionally, an Arrow boolean column (one chunk, no nulls) of the same length.
 *       The first capsule: a struct array (c0 = the first row of each group that occurs, c1 = the union
 *       length of its [start, end) intervals, c2 = its rows, c3 = its largest end, c4 = its rows whose
 *       flag is set), groups in key order. The second (want_prev): a struct array of
 *       one column, per row the largest end of the earlier rows of its group (null for a group's first row).
 *   first_seen(keys, lo, span) -> capsule: a struct array of one boolean column, per row whether its key
 *       (in [lo, lo + span)) occurs there for the first time: polars' is_first_distinct by a bitmap, no hash.
 *   merge_runs(starts, ends, offsets) -> capsule: a struct array of one int64 column, the row order that
 *       merges runs of rows already in (start, end) order (run r from offsets[r]) into one such order, ties
 *       in run order; ValueError when a run is not in order.
 *   lookup(build, probe) -> capsule: a struct array of one int64 column, per probe key (non-negative, or -1
 *       for none) the first row of `build` (non-negative keys) holding it, or null: a hash join of one key.
 */
#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "_arrow.h"

typedef struct {
    struct ArrowArray array; /* held (released by column_close) */
    const int64_t *values;   /* an int64 column */
    const uint8_t *valid;    /* its validity bits (from bit first_bit), where it may hold nulls; else NULL */
    const uint8_t *bits;     /* or a boolean column: its bits, from bit `first_bit` */
    int64_t first_bit;
    int64_t n;
} input_t;

static void column_close(input_t *in) {
    if (in->array.release) in->array.release(&in->array);
    in->array.release = NULL;
}

/* The int64 values of a one-chunk, null-free Arrow stream (the capsule keeps the stream; this holds the
 * chunk until column_close). */
static int column_open_as(PyObject *capsule, input_t *in, const char *what, const char *format, int nulls_ok);

static int column_open(PyObject *capsule, input_t *in, const char *what) {
    return column_open_as(capsule, in, what, "l", 0);
}

/* An int64 column that may hold nulls (its validity bits kept in `valid`). */
static int keys_open(PyObject *capsule, input_t *in, const char *what) {
    return column_open_as(capsule, in, what, "l", 1);
}

/* The bits of a one-chunk, null-free Arrow boolean stream. */
static int flags_open(PyObject *capsule, input_t *in, const char *what) {
    return column_open_as(capsule, in, what, "b", 0);
}

static int column_open_as(PyObject *capsule, input_t *in, const char *what, const char *format, int nulls_ok) {
    memset(in, 0, sizeof *in);
    struct ArrowArrayStream *st = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (!st) return -1;
    if (!st->release) {
        PyErr_Format(PyExc_ValueError, "%s: the stream was already consumed", what);
        return -1;
    }
    struct ArrowSchema schema;
    if (st->get_schema(st, &schema) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: no schema", what);
        return -1;
    }
    int fits = schema.format && strcmp(schema.format, format) == 0;
    if (schema.release) schema.release(&schema);
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "%s: not a column of Arrow format '%s'", what, format);
        return -1;
    }
    if (st->get_next(st, &in->array) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: the stream failed", what);
        return -1;
    }
    if (!in->array.release) return 0; /* no chunk: no rows */
    struct ArrowArray more;
    if (st->get_next(st, &more) != 0 || more.release) {
        if (more.release) more.release(&more);
        column_close(in);
        PyErr_Format(PyExc_ValueError, "%s: more than one chunk", what);
        return -1;
    }
    if ((in->array.null_count != 0 && !(nulls_ok && in->array.buffers[0])) || in->array.n_buffers != 2 ||
        !in->array.buffers[1]) {
        column_close(in);
        PyErr_Format(PyExc_ValueError, "%s: has nulls, or is not a plain array", what);
        return -1;
    }
    if (in->array.null_count != 0) in->valid = (const uint8_t *)in->array.buffers[0];
    in->first_bit = in->array.offset;
    if (format[0] == 'b') {
        in->bits = (const uint8_t *)in->array.buffers[1];
        in->first_bit = in->array.offset;
    } else {
        in->values = (const int64_t *)in->array.buffers[1] + in->array.offset;
    }
    in->n = in->array.length;
    return 0;
}

static int scan(const input_t *keys, const int64_t *start, const int64_t *end, const input_t *flags, int64_t n,
                int64_t lo, int64_t span, result_t *groups, result_t *prev) {
    const int64_t *key = keys->values;
    int64_t *last = malloc((size_t)span * sizeof *last);
    int64_t *first = malloc((size_t)span * sizeof *first);
    int64_t *busy = calloc((size_t)span, sizeof *busy);
    int64_t *count = calloc((size_t)span, sizeof *count);
    int64_t *flagged = calloc((size_t)span, sizeof *flagged);
    int rc = OK;
    if (!last || !first || !busy || !count || !flagged) {
        rc = E_NOMEM;
        goto out;
    }
    memset(first, 0xff, (size_t)span * sizeof *first); /* -1: not seen */
    if (prev && (rc = result_grow(prev, n + 1))) goto out;
    int64_t *out = prev ? (int64_t *)prev->cols[0].data.p : NULL;
    for (int64_t i = 0; i < n; i++) {
        int64_t vb = keys->first_bit + i;
        if (key[i] < 0 || (keys->valid && !((keys->valid[vb >> 3] >> (vb & 7)) & 1))) { /* a row of no group */
            if (out) {
                out[i] = 0;
                if ((rc = column_set_null(&prev->cols[0], i, prev->cap))) goto out;
            }
            continue;
        }
        int64_t g = key[i] - lo;
        if (g < 0 || g >= span) {
            rc = E_UNSUPPORTED;
            goto out;
        }
        int64_t s = start[i], e = end[i];
        count[g]++;
        if (flags) {
            int64_t b = flags->first_bit + i;
            flagged[g] += (flags->bits[b >> 3] >> (b & 7)) & 1;
        }
        if (first[g] < 0) {
            first[g] = i;
            last[g] = e;
            busy[g] += e > s ? e - s : 0;
            if (out) {
                out[i] = 0;
                if ((rc = column_set_null(&prev->cols[0], i, prev->cap))) goto out;
            }
        } else {
            int64_t p = last[g];
            int64_t from = s > p ? s : p;
            busy[g] += e > from ? e - from : 0;
            if (e > p) last[g] = e;
            if (out) out[i] = p;
        }
    }
    if (prev) prev->rows = n;
    int64_t present = 0;
    for (int64_t g = 0; g < span; g++) present += first[g] >= 0;
    if ((rc = result_grow(groups, present + 1))) goto out;
    int64_t *rows = (int64_t *)groups->cols[0].data.p, *lengths = (int64_t *)groups->cols[1].data.p;
    int64_t *counts = (int64_t *)groups->cols[2].data.p, *ends = (int64_t *)groups->cols[3].data.p;
    int64_t *flags_out = (int64_t *)groups->cols[4].data.p, k = 0;
    for (int64_t g = 0; g < span; g++) {
        if (first[g] < 0) continue;
        rows[k] = first[g];
        lengths[k] = busy[g];
        counts[k] = count[g];
        ends[k] = last[g];
        flags_out[k] = flagged[g];
        k++;
    }
    groups->rows = present;
out:
    free(last);
    free(first);
    free(busy);
    free(count);
    free(flagged);
    return rc;
}

static PyObject *py_groups(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *kc, *sc, *ec, *fc = Py_None;
    long long lo, span;
    int want_prev;
    if (!PyArg_ParseTuple(args, "OOOLLp|O", &kc, &sc, &ec, &lo, &span, &want_prev, &fc)) return NULL;
    if (span < 1 || span > ((long long)1 << 34)) {
        PyErr_SetString(PyExc_ValueError, "span out of range");
        return NULL;
    }
    input_t keys, starts, ends;
    if (keys_open(kc, &keys, "keys")) return NULL;
    if (column_open(sc, &starts, "starts")) {
        column_close(&keys);
        return NULL;
    }
    if (column_open(ec, &ends, "ends")) {
        column_close(&keys);
        column_close(&starts);
        return NULL;
    }
    input_t flags = {0};
    if (fc != Py_None && flags_open(fc, &flags, "flags")) {
        column_close(&keys);
        column_close(&starts);
        column_close(&ends);
        return NULL;
    }
    PyObject *result = NULL;
    result_t groups = {0}, prev = {0};
    if (result_init(&groups, "iiiii") || result_init(&prev, "i")) goto done;
    if (keys.n != starts.n || keys.n != ends.n || (fc != Py_None && flags.n != keys.n)) {
        PyErr_SetString(PyExc_ValueError, "keys, starts and ends differ in length");
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan(&keys, starts.values, ends.values, fc != Py_None ? &flags : NULL, keys.n, lo, span, &groups,
              want_prev ? &prev : NULL);
    Py_END_ALLOW_THREADS
    PyObject *g = result_or_error(rc, &groups, "iiiii", "a key lies outside [lo, lo + span)");
    if (!g) goto done;
    PyObject *p = Py_None;
    if (want_prev) {
        p = result_to_capsule(&prev, "i");
        if (!p) {
            Py_DECREF(g);
            goto done;
        }
    } else {
        Py_INCREF(p);
    }
    result = PyTuple_Pack(2, g, p);
    Py_DECREF(g);
    Py_DECREF(p);
done:
    result_free(&groups);
    result_free(&prev);
    column_close(&keys);
    column_close(&starts);
    column_close(&ends);
    column_close(&flags);
    return result;
}

/* Per row: whether its key occurs here for the first time (a bit per key of [lo, lo + span)). */
static int first_seen(const int64_t *key, int64_t n, int64_t lo, int64_t span, result_t *mask) {
    uint8_t *seen = calloc((size_t)(span + 7) / 8 + 1, 1); /* untouched pages stay unallocated */
    if (!seen) return E_NOMEM;
    int rc = result_grow(mask, n + 1);
    if (rc == OK) {
        uint8_t *out = mask->cols[0].data.p;
        for (int64_t i = 0; i < n; i++) {
            int64_t g = key[i] - lo;
            if (g < 0 || g >= span) {
                rc = E_UNSUPPORTED;
                break;
            }
            uint8_t bit = (uint8_t)(1u << (g & 7));
            if (!(seen[g >> 3] & bit)) {
                seen[g >> 3] |= bit;
                out[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
        }
        mask->rows = n;
    }
    free(seen);
    return rc;
}

static PyObject *py_first_seen(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *kc;
    long long lo, span;
    if (!PyArg_ParseTuple(args, "OLL", &kc, &lo, &span)) return NULL;
    if (span < 1 || span > ((long long)1 << 36)) {
        PyErr_SetString(PyExc_ValueError, "span out of range");
        return NULL;
    }
    input_t keys;
    if (column_open(kc, &keys, "keys")) return NULL;
    PyObject *result = NULL;
    result_t mask;
    if (result_init(&mask, "B")) goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = first_seen(keys.values, keys.n, lo, span, &mask);
    Py_END_ALLOW_THREADS
    result = result_or_error(rc, &mask, "B", "a key lies outside [lo, lo + span)");
done:
    result_free(&mask);
    column_close(&keys);
    return result;
}

/* Per probe key, the row of the build key equal to it (the first such row), or null; a negative probe key
 * (no key) finds nothing. Open addressing over a power-of-two table, linear probing. The hash keeps the
 * low bits of the key (correlation ids grow with time, so ops in start order probe nearby slots: a
 * cache-friendly walk, 10x faster than a mixing hash here); a trace whose keys collide anyway is caught by
 * a bound on the total probe steps (E_UNSUPPORTED: the caller joins in polars). */
typedef struct {
    int64_t key, row;
} slot_t;

static inline uint64_t slot_of(int64_t k, uint64_t mask) { return ((uint64_t)k ^ ((uint64_t)k >> 24)) & mask; }

static int lookup(const int64_t *build, int64_t nb, const int64_t *probe, int64_t np, result_t *rows) {
    uint64_t cap = 16;
    while (cap < (uint64_t)nb + (uint64_t)nb / 2) cap <<= 1; /* at most 2/3 full */
    const uint64_t mask = cap - 1, budget = 16 * ((uint64_t)nb + (uint64_t)np) + 4096;
    uint64_t steps = 0;
    slot_t *table = malloc(cap * sizeof *table);
    int rc = OK;
    if (!table) return E_NOMEM;
    for (uint64_t i = 0; i < cap; i++) table[i].key = -1; /* empty */
    for (int64_t i = 0; i < nb; i++) {
        int64_t k = build[i];
        if (k < 0) {
            rc = E_UNSUPPORTED;
            goto out;
        }
        uint64_t h = slot_of(k, mask);
        while (table[h].key != -1 && table[h].key != k) {
            h = (h + 1) & mask;
            if (++steps > budget) {
                rc = E_UNSUPPORTED;
                goto out;
            }
        }
        if (table[h].key == -1) {
            table[h].key = k;
            table[h].row = i;
        }
    }
    if ((rc = result_grow(rows, np + 1))) goto out;
    column_t *c = &rows->cols[0];
    int64_t *out = (int64_t *)c->data.p;
    for (int64_t i = 0; i < np; i++) {
        int64_t k = probe[i], found = -1;
        if (k >= 0) {
            for (uint64_t h = slot_of(k, mask); table[h].key != -1; h = (h + 1) & mask) {
                if (table[h].key == k) {
                    found = table[h].row;
                    break;
                }
                if (++steps > budget) {
                    rc = E_UNSUPPORTED;
                    goto out;
                }
            }
        }
        out[i] = found < 0 ? 0 : found;
        if (found < 0 && (rc = column_set_null(c, i, rows->cap))) goto out;
    }
    rows->rows = np;
out:
    free(table);
    return rc;
}

static PyObject *py_lookup(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bc, *pc;
    if (!PyArg_ParseTuple(args, "OO", &bc, &pc)) return NULL;
    input_t build, probe;
    if (column_open(bc, &build, "build keys")) return NULL;
    if (column_open(pc, &probe, "probe keys")) {
        column_close(&build);
        return NULL;
    }
    PyObject *result = NULL;
    result_t rows;
    if (result_init(&rows, "i")) goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = lookup(build.values, build.n, probe.values, probe.n, &rows);
    Py_END_ALLOW_THREADS
    result = result_or_error(rc, &rows, "i", "a build key is negative, or the keys collide too much");
done:
    result_free(&rows);
    column_close(&build);
    column_close(&probe);
    return result;
}

/* The order that merges sorted runs of rows (each in (start, end) order; run r holds the rows from
 * offsets[r]) into one (start, end) order, ties in run order: out[i] = the row placed i-th. E_UNSUPPORTED
 * when a run is not in order (the caller sorts instead). */
enum { MAX_RUNS = 16 };

static int merge_runs(const int64_t *start, const int64_t *end, const int64_t *offsets, int runs, int64_t n,
                      result_t *order) {
    int64_t head[MAX_RUNS], stop[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        head[r] = offsets[r];
        stop[r] = r + 1 < runs ? offsets[r + 1] : n;
        if (head[r] < 0 || stop[r] > n || head[r] > stop[r]) return E_UNSUPPORTED;
        for (int64_t i = head[r] + 1; i < stop[r]; i++)
            if (start[i] < start[i - 1] || (start[i] == start[i - 1] && end[i] < end[i - 1])) return E_UNSUPPORTED;
    }
    int rc = result_grow(order, n + 1);
    if (rc) return rc;
    int64_t *out = (int64_t *)order->cols[0].data.p;
    for (int64_t i = 0; i < n; i++) {
        int best = -1;
        for (int r = 0; r < runs; r++) {
            if (head[r] >= stop[r]) continue;
            if (best < 0) {
                best = r;
                continue;
            }
            int64_t a = head[r], b = head[best];
            if (start[a] < start[b] || (start[a] == start[b] && end[a] < end[b])) best = r;
        }
        out[i] = head[best]++;
    }
    order->rows = n;
    return OK;
}

static PyObject *py_merge_runs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sc, *ec, *offsets_obj;
    if (!PyArg_ParseTuple(args, "OOO!", &sc, &ec, &PyTuple_Type, &offsets_obj)) return NULL;
    Py_ssize_t runs = PyTuple_Size(offsets_obj);
    if (runs < 1 || runs > MAX_RUNS) {
        PyErr_SetString(PyExc_ValueError, "between 1 and 16 runs");
        return NULL;
    }
    int64_t offsets[MAX_RUNS];
    for (Py_ssize_t r = 0; r < runs; r++) {
        offsets[r] = PyLong_AsLongLong(PyTuple_GetItem(offsets_obj, r));
        if (offsets[r] == -1 && PyErr_Occurred()) return NULL;
    }
    input_t starts, ends;
    if (column_open(sc, &starts, "starts")) return NULL;
    if (column_open(ec, &ends, "ends")) {
        column_close(&starts);
        return NULL;
    }
    PyObject *result = NULL;
    result_t order;
    if (starts.n != ends.n) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto close;
    }
    if (result_init(&order, "i")) goto close;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = merge_runs(starts.values, ends.values, offsets, (int)runs, starts.n, &order);
    Py_END_ALLOW_THREADS
    result = result_or_error(rc, &order, "i", "a run is not in (start, end) order");
    result_free(&order);
close:
    column_close(&starts);
    column_close(&ends);
    return result;
}

/* A crash in native code. When the process is close to a memory limit it runs under (an allocation that failed
 * there, which a library dereferenced or an allocator aborted on), it ends with one out-of-memory line on stderr
 * and status 2: the handler only reads /proc/self/statm, getrlimit()s, write()s a message set beforehand and
 * _exit()s, on an alternate stack. Any other crash is a bug: the handler write()s that signal's own line, puts
 * back the handler it replaced (Python's faulthandler, which prints the traceback, or the default action) and
 * raises the signal again, which that handler gets as soon as this one returns. */
#define FATAL_SIGNALS 5
static const int fatal_signals[FATAL_SIGNALS] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
static char fatal_oom[1024];
static size_t fatal_oom_len;
static char fatal_crash[FATAL_SIGNALS][1024];
static size_t fatal_crash_len[FATAL_SIGNALS];
static struct sigaction fatal_previous[FATAL_SIGNALS];
static int fatal_installed[FATAL_SIGNALS];
static unsigned long long fatal_page = 4096;
static char fatal_stack[1 << 16];

/* Whether the process's size is at least half of its address-space limit (RLIMIT_AS, `ulimit -v`), or its data
 * at least half of its data limit (RLIMIT_DATA): an allocation that failed is then what crashed, as a rule (one
 * that fails asks for more than is left). Without such a limit, no. */
static int near_memory_limit(void) {
    char buf[256];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    unsigned long long field[7] = {0};
    int k = 0;
    const char *p = buf;
    while (k < 7) {
        while (*p == ' ') p++;
        if (*p < '0' || *p > '9') break;
        unsigned long long v = 0;
        while (*p >= '0' && *p <= '9' && v < (1ULL << 50)) v = v * 10 + (unsigned long long)(*p++ - '0');
        field[k++] = v;
    }
    if (k < 6) return 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        field[0] * fatal_page >= (unsigned long long)rl.rlim_cur / 2)
        return 1;
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        field[5] * fatal_page >= (unsigned long long)rl.rlim_cur / 2)
        return 1;
    return 0;
}

static void on_fatal(int sig) {
    int i = 0;
    while (i < FATAL_SIGNALS && fatal_signals[i] != sig) i++;
    if (i == FATAL_SIGNALS || near_memory_limit()) {
        ssize_t ignored = write(2, fatal_oom, fatal_oom_len);
        (void)ignored;
        _exit(2);
    }
    ssize_t ignored = write(2, fatal_crash[i], fatal_crash_len[i]);
    (void)ignored;
    struct sigaction next = fatal_previous[i];
    if (!(next.sa_flags & SA_SIGINFO) && next.sa_handler == SIG_IGN) next.sa_handler = SIG_DFL;
    sigaction(sig, &next, NULL);
    raise(sig);
}

static size_t fatal_copy(char *to, size_t size, PyObject *text) {
    char *bytes;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(text, &bytes, &n) < 0) return (size_t)-1;
    if ((size_t)n >= size) n = (Py_ssize_t)size - 1;
    memcpy(to, bytes, (size_t)n);
    return (size_t)n;
}

static PyObject *py_fatal_line(PyObject *self, PyObject *args) {
    PyObject *oom, *crashes;
    (void)self;
    if (!PyArg_ParseTuple(args, "SO", &oom, &crashes)) return NULL;
    size_t oom_len = fatal_copy(fatal_oom, sizeof fatal_oom, oom);
    if (oom_len == (size_t)-1) return NULL;
    fatal_oom_len = oom_len;
    for (int i = 0; i < FATAL_SIGNALS; i++) {
        PyObject *key = PyLong_FromLong(fatal_signals[i]);
        if (key == NULL) return NULL;
        PyObject *text = PyObject_GetItem(crashes, key);
        Py_DECREF(key);
        if (text == NULL) return NULL;
        size_t len = fatal_copy(fatal_crash[i], sizeof fatal_crash[i], text);
        Py_DECREF(text);
        if (len == (size_t)-1) return NULL;
        fatal_crash_len[i] = len;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) fatal_page = (unsigned long long)page;
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = fatal_stack;
    ss.ss_size = sizeof fatal_stack;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < FATAL_SIGNALS; i++) {
        struct sigaction previous;
        if (sigaction(fatal_signals[i], &sa, &previous) == 0 && !fatal_installed[i]) {
            fatal_previous[i] = previous;  /* a second call keeps the handler the first one replaced */
            fatal_installed[i] = 1;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fatal_line", py_fatal_line, METH_VARARGS,
     "fatal_line(out_of_memory: bytes, crashes: {signal number: bytes}): on a crash in native code (SIGSEGV, "
     "SIGBUS, SIGABRT, SIGILL, SIGFPE) close to a memory limit, write out_of_memory to stderr and exit with status "
     "2; on any other, write that signal's line and pass the signal on to the handler replaced"},
    {"merge_runs", py_merge_runs, METH_VARARGS,
     "merge_runs(starts, ends, offsets) -> the order merging sorted runs into one (start, end) order"},
    {"lookup", py_lookup, METH_VARARGS,
     "lookup(build_keys, probe_keys) -> per probe key, the row of the equal build key, or null"},
    {"first_seen", py_first_seen, METH_VARARGS,
     "first_seen(keys, lo, span) -> per row, whether its key occurs for the first time"},
    {"groups", py_groups, METH_VARARGS,
     "groups(keys, starts, ends, lo, span, want_prev[, flags]) -> (per-group first row, union length, rows, "
     "largest end, flagged rows; per-row prev end)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "One pass over ops in start order, per group: running max of ends, union length.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
