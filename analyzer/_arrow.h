/* Arrow arrays made in C and handed to polars through the Arrow C stream interface
 * (https://arrow.apache.org/docs/format/CDataInterface.html): columns of int64 ('i', with an optional
 * validity bitmap) or binary ('b') values, built in growable buffers, moved into one struct array (children
 * c0, c1, ...) and wrapped in a PyCapsule named "arrow_array_stream" that polars' constructors take. Shared by
 * the extension modules (analyzer/readers/nsys/_sqlite_pages.c, analyzer/_scan.c); header-only, each module its
 * own static copy.
 */
#ifndef SPECPROF_ARROW_H
#define SPECPROF_ARROW_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, E_UNSUPPORTED = 1, E_CORRUPT = 2, E_NOMEM = 3, E_IO = 4 };

/* ---------------------------------------------------------------- Arrow C data interface (arrow.apache.org) */
#define ARROW_FLAG_NULLABLE 2
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

/* ---------------------------------------------------------------- growable buffers */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    void *q = realloc(b->p, cap);
    if (!q) return E_NOMEM;
    b->p = q;
    b->cap = cap;
    return OK;
}

typedef struct {
    int index;  /* where the values come from (the reader's own meaning) */
    char kind;  /* 'i' int64, 'b' binary, 'B' boolean (one bit a row) */
    buf_t data; /* int64 values, or the bytes of binary values */
    buf_t offs; /* int32 offsets (binary) */
    uint8_t *valid; /* validity bitmap, made at the first NULL */
    int64_t nulls;
} column_t;

typedef struct {
    column_t *cols;
    int ncols;
    int64_t rows;
    int64_t cap; /* rows the buffers hold */
} result_t;

/* A result of one column per kind in `kinds` ('i', 'b' or 'B'), no rows yet: 0, or -1 with a Python
 * MemoryError set. */
static inline int result_init(result_t *r, const char *kinds) {
    r->ncols = (int)strlen(kinds);
    r->rows = r->cap = 0;
    r->cols = calloc((size_t)r->ncols + 1, sizeof *r->cols);
    if (!r->cols) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < r->ncols; i++) r->cols[i].kind = kinds[i];
    return 0;
}

static void result_free(result_t *r) {
    if (!r->cols) return;
    for (int i = 0; i < r->ncols; i++) {
        free(r->cols[i].data.p);
        free(r->cols[i].offs.p);
        free(r->cols[i].valid);
    }
    free(r->cols);
    r->cols = NULL;
}

static uint8_t *valid_bitmap(int64_t rows) { /* every row valid */
    size_t nb = (size_t)(rows + 7) / 8 + 1;
    uint8_t *v = malloc(nb);
    if (v) memset(v, 0xff, nb);
    return v;
}

/* Marks row `row` of column `c` null: its validity bitmap (`cap` rows, all valid) is made at the first null. */
static inline int column_set_null(column_t *c, int64_t row, int64_t cap) {
    if (!c->valid && !(c->valid = valid_bitmap(cap))) return E_NOMEM;
    c->valid[row >> 3] &= (uint8_t) ~(1u << (row & 7));
    c->nulls++;
    return OK;
}

/* Room for `need` rows in every column (doubling: amortised one copy per value). */
static int result_grow(result_t *r, int64_t need) {
    int64_t cap = r->cap ? r->cap : 4096;
    while (cap < need) cap *= 2;
    for (int i = 0; i < r->ncols; i++) {
        column_t *c = &r->cols[i];
        if (c->kind == 'B') { /* bits, zeroed */
            size_t old = c->data.cap, nb = (size_t)(cap + 7) / 8 + 1;
            if (buf_reserve(&c->data, nb - c->data.len)) return E_NOMEM;
            memset(c->data.p + old, 0, c->data.cap - old);
        } else {
            buf_t *b = c->kind == 'i' ? &c->data : &c->offs;
            size_t width = c->kind == 'i' ? 8 : 4;
            if (buf_reserve(b, (size_t)(cap + 1) * width - b->len)) return E_NOMEM;
            if (c->kind != 'i' && r->cap == 0) memset(c->offs.p, 0, 4);
        }
        if (c->valid) {
            size_t old = (size_t)(r->cap + 7) / 8 + 1, nb = (size_t)(cap + 7) / 8 + 1;
            uint8_t *v = realloc(c->valid, nb);
            if (!v) return E_NOMEM;
            memset(v + old, 0xff, nb - old);
            c->valid = v;
        }
    }
    r->cap = cap;
    return OK;
}

/* ---------------------------------------------------------------- export as one Arrow struct array */
typedef struct {
    const void *buffers[3];
    void *owned[3];
} child_private_t;

static void release_child(struct ArrowArray *a) {
    child_private_t *pd = a->private_data;
    for (int i = 0; i < 3; i++) free(pd->owned[i]);
    free(pd);
    a->release = NULL;
}

static void release_struct(struct ArrowArray *a) {
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c->release) c->release(c);
        free(c);
    }
    free(a->children);
    free(a->private_data); /* the struct's buffer list */
    a->release = NULL;
}

/* Moves the result's buffers into `out` (the result no longer owns them). */
static int export_array(result_t *r, struct ArrowArray *out) {
    memset(out, 0, sizeof *out);
    struct ArrowArray **children = calloc((size_t)r->ncols ? (size_t)r->ncols : 1, sizeof *children);
    const void **sbuf = calloc(1, sizeof *sbuf);
    if (!children || !sbuf) {
        free(children);
        free(sbuf);
        return E_NOMEM;
    }
    out->length = r->rows;
    out->n_buffers = 1;
    out->buffers = sbuf;
    out->n_children = r->ncols;
    out->children = children;
    out->release = release_struct;
    out->private_data = sbuf;
    for (int i = 0; i < r->ncols; i++) {
        column_t *c = &r->cols[i];
        struct ArrowArray *a = calloc(1, sizeof *a);
        child_private_t *pd = calloc(1, sizeof *pd);
        if (!a || !pd) {
            free(a);
            free(pd);
            out->n_children = i;
            release_struct(out);
            return E_NOMEM;
        }
        a->length = r->rows;
        a->null_count = c->nulls;
        pd->owned[0] = c->valid;
        pd->buffers[0] = c->nulls ? c->valid : NULL;
        c->valid = NULL;
        if (c->kind == 'i' || c->kind == 'B') {
            a->n_buffers = 2;
            pd->owned[1] = c->data.p;
            pd->buffers[1] = c->data.p;
        } else {
            if (buf_reserve(&c->data, 1)) { /* a non-null data buffer even when every value is empty */
                free(a);
                free(pd);
                out->n_children = i;
                release_struct(out);
                return E_NOMEM;
            }
            a->n_buffers = 3;
            pd->owned[1] = c->offs.p;
            pd->buffers[1] = c->offs.p;
            pd->owned[2] = c->data.p;
            pd->buffers[2] = c->data.p;
            c->offs.p = NULL;
        }
        c->data.p = NULL;
        a->buffers = pd->buffers;
        a->private_data = pd;
        a->release = release_child;
        children[i] = a;
    }
    return OK;
}

static void release_schema(struct ArrowSchema *s) {
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c->release) c->release(c);
        free(c);
    }
    free(s->children);
    free(s->private_data); /* names */
    s->release = NULL;
}

static void release_leaf_schema(struct ArrowSchema *s) { s->release = NULL; }

typedef struct {
    struct ArrowArray array; /* released (release == NULL) once handed out */
    char *kinds;             /* one per column */
    int ncols;
} stream_private_t;

static int stream_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
    stream_private_t *sp = st->private_data;
    memset(out, 0, sizeof *out);
    struct ArrowSchema **children = calloc((size_t)sp->ncols ? (size_t)sp->ncols : 1, sizeof *children);
    char *names = calloc((size_t)sp->ncols ? (size_t)sp->ncols : 1, 16);
    if (!children || !names) {
        free(children);
        free(names);
        return ENOMEM;
    }
    out->format = "+s";
    out->name = "";
    out->n_children = sp->ncols;
    out->children = children;
    out->private_data = names;
    out->release = release_schema;
    for (int i = 0; i < sp->ncols; i++) {
        struct ArrowSchema *c = calloc(1, sizeof *c);
        if (!c) {
            out->n_children = i;
            release_schema(out);
            return ENOMEM;
        }
        snprintf(names + 16 * i, 16, "c%d", i);
        c->format = sp->kinds[i] == 'i' ? "l" : sp->kinds[i] == 'B' ? "b" : "z";
        c->name = names + 16 * i;
        c->flags = ARROW_FLAG_NULLABLE;
        c->release = release_leaf_schema;
        children[i] = c;
    }
    return 0;
}

static int stream_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
    stream_private_t *sp = st->private_data;
    *out = sp->array; /* the first call moves the array out; later calls see release == NULL: the end */
    sp->array.release = NULL;
    return 0;
}

static const char *stream_last_error(struct ArrowArrayStream *st) {
    (void)st;
    return NULL;
}

static void stream_release(struct ArrowArrayStream *st) {
    stream_private_t *sp = st->private_data;
    if (sp) {
        if (sp->array.release) sp->array.release(&sp->array);
        free(sp->kinds);
        free(sp);
    }
    st->private_data = NULL;
    st->release = NULL;
}

static void capsule_destructor(PyObject *capsule) {
    struct ArrowArrayStream *st = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (!st) {
        PyErr_Clear();
        return;
    }
    if (st->release) st->release(st);
    free(st);
}

/* The result as a stream capsule (its buffers move into it; `kinds` is copied), or NULL with a Python
 * exception set. */
static PyObject *result_to_capsule(result_t *r, const char *kinds);

/* After a computation that filled `r`: its capsule when rc is OK, else NULL with MemoryError (E_NOMEM)
 * or ValueError(`refused`) set. */
static inline PyObject *result_or_error(int rc, result_t *r, const char *kinds, const char *refused) {
    if (rc == E_NOMEM) return PyErr_NoMemory();
    if (rc != OK) {
        PyErr_SetString(PyExc_ValueError, refused);
        return NULL;
    }
    return result_to_capsule(r, kinds);
}

static PyObject *result_to_capsule(result_t *r, const char *kinds) {
    struct ArrowArrayStream *st = calloc(1, sizeof *st);
    stream_private_t *sp = calloc(1, sizeof *sp);
    char *k = malloc((size_t)r->ncols + 1);
    if (!st || !sp || !k || export_array(r, &sp->array) != OK) {
        free(st);
        free(sp);
        free(k);
        return PyErr_NoMemory();
    }
    memcpy(k, kinds, (size_t)r->ncols);
    sp->kinds = k;
    sp->ncols = r->ncols;
    st->get_schema = stream_get_schema;
    st->get_next = stream_get_next;
    st->get_last_error = stream_last_error;
    st->release = stream_release;
    st->private_data = sp;
    PyObject *capsule = PyCapsule_New(st, "arrow_array_stream", capsule_destructor);
    if (!capsule) {
        stream_release(st);
        free(st);
    }
    return capsule;
}

#endif
