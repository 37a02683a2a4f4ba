/* Reads rows of a rowid table straight from an SQLite 3 database file's B-tree pages, columns out as
 * Arrow arrays (the Arrow C stream interface: polars imports them without a copy).
 *
 * Why: SQLite's own engine spends most of a bulk read in its bytecode interpreter (one Column opcode per
 * value, ~60 ns each); an nsys export's large tables are plain rowid tables of small integer records, which
 * this walks directly: one pass over each leaf page, each wanted value decoded where it lies. It reads only
 * what the file format documents (https://www.sqlite.org/fileformat2.html): table B-tree pages, cells,
 * record headers, serial types. Anything else (an overflowing record, a real or blob where an integer is
 * wanted, a write-ahead-log database) raises `Unsupported`, and the caller reads the table through SQLite
 * instead. The file is untrusted: every offset, length, varint and page number is checked against the bounds
 * it must lie in before it is used, and every structure walked is checked as SQLite's integrity check checks
 * it (interior keys in order and bounding their children, leaves at one depth, cells inside their page and
 * apart, rowids ascending, each record's header adding up to its payload): where one fails, `Corrupt`, and
 * the caller refuses the table (a damaged export is never read as if whole). Text comes out as the bytes the
 * file holds, in the database's text encoding (UTF-8 or UTF-16): the caller decodes it.
 *
 * Python API (module specprof.analyzer.readers.nsys._sqlite_pages):
 *   leaves(path, root) -> bytes            the table's leaves in rowid order, LEAF_SIZE bytes each (a page
 *                                          number and the rowids the interior pages allow it)
 *   read(path, leaves, columns, kinds, filters, defaults, notnull) -> capsule "arrow_array_stream"
 *       leaves:  a bytes-like slice of what leaves() returned, on LEAF_SIZE boundaries
 *       columns: tuple of record column indices to return; -1 returns each row's rowid (kind b'i')
 *       kinds:   bytes, one per column: b'i' (int64) or b'b' (binary: text bytes)
 *       filters: tuple of (column, bitmap: bytes, outside: bool, null: bool[, base: int]): a row is kept when,
 *                for every filter, its integer value v has bit v - base set in bitmap (LSB first; base 0
 *                unless given), or lies outside the bitmap and `outside` is true, or is NULL and `null` is true.
 *       defaults: per record column from the first, what a record too short to hold it gives (ALTER TABLE
 *                ... ADD COLUMN ... DEFAULT): None (NULL), an int, or bytes (text); columns past it: NULL.
 *       notnull: bytes, one per record column from the first: 1 where the column is declared NOT NULL.
 *   The stream yields one struct array (children c0, c1, ...) and ends.
 *   read(..., notnull, group) -> bytes   the same rows, not returned: per `group` leaves (a zone), its rows,
 *       and per column (integers) its least and greatest value, a mask of the values 0..63 and flags
 *       (zone_of says the layout): what a reader needs to know which zones can hold which rows.
 *   read(..., notnull, group, start, end): also, a row kept whose record column `end` holds an integer below
 *       the integer in record column `start` is Corrupt (a time span that ends before it starts); -1: none.
 */
#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "_arrow.h"

static PyObject *Unsupported; /* the table cannot be read this way: read it through SQLite */
static PyObject *Corrupt;     /* the file is not what its header says: let SQLite diagnose it */


/* ---------------------------------------------------------------- the file */
typedef struct {
    int fd;
    uint64_t size;
    uint32_t page_size;
    uint32_t usable;
    uint64_t npages; /* whole pages in the file */
    char why[160];
} db_t;

/* Reads `len` bytes at `at`, all of them, or fails. */
static int read_at(db_t *db, void *dst, size_t len, uint64_t at) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(db->fd, (char *)dst + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(db->why, sizeof db->why, n < 0 ? "a read failed (%s)" : "the file ends early%s",
                     n < 0 ? strerror(errno) : "");
            return n < 0 ? E_IO : E_CORRUPT;
        }
        done += (size_t)n;
    }
    return OK;
}

static int db_open(db_t *db, const char *path) {
    memset(db, 0, sizeof *db);
    db->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (db->fd < 0) {
        snprintf(db->why, sizeof db->why, "cannot open (%s)", strerror(errno));
        return E_IO;
    }
    struct stat st;
    uint8_t h[100];
    if (fstat(db->fd, &st) != 0 || st.st_size < 100) {
        snprintf(db->why, sizeof db->why, "shorter than an SQLite header");
        return E_CORRUPT;
    }
    db->size = (uint64_t)st.st_size;
    int rc = read_at(db, h, sizeof h, 0);
    if (rc) return rc;
    if (memcmp(h, "SQLite format 3", 16) != 0) {
        snprintf(db->why, sizeof db->why, "not an SQLite 3 file");
        return E_CORRUPT;
    }
    uint32_t ps = ((uint32_t)h[16] << 8) | h[17];
    if (ps == 1) ps = 65536;
    if (ps < 512 || ps > 65536 || (ps & (ps - 1))) {
        snprintf(db->why, sizeof db->why, "page size %u is not valid", ps);
        return E_CORRUPT;
    }
    if (h[18] == 2 || h[19] == 2) { /* WAL: committed pages may live in the -wal file */
        snprintf(db->why, sizeof db->why, "write-ahead-log database");
        return E_UNSUPPORTED;
    }
    uint32_t enc = ((uint32_t)h[56] << 24) | ((uint32_t)h[57] << 16) | ((uint32_t)h[58] << 8) | h[59];
    if (enc > 3) { /* 1 UTF-8, 2 UTF-16le, 3 UTF-16be (text comes out as its bytes: the caller decodes) */
        snprintf(db->why, sizeof db->why, "text encoding %u is not valid", enc);
        return E_CORRUPT;
    }
    uint32_t reserved = h[20];
    if (reserved >= ps || ps - reserved < 480) {
        snprintf(db->why, sizeof db->why, "reserved space %u is not valid", reserved);
        return E_CORRUPT;
    }
    db->page_size = ps;
    db->usable = ps - reserved;
    db->npages = db->size / ps;
    return OK;
}

static void db_close(db_t *db) {
    if (db->fd >= 0) close(db->fd);
    db->fd = -1;
}

/* Reads page n (1-based) into buf (page_size bytes); *hdr: where its B-tree header starts (page 1
 * carries the 100-byte file header first). */
static int db_page(db_t *db, uint64_t n, uint8_t *buf, uint32_t *hdr) {
    if (n < 1 || n > db->npages) {
        snprintf(db->why, sizeof db->why, "page %llu lies outside the file", (unsigned long long)n);
        return E_CORRUPT;
    }
    *hdr = n == 1 ? 100 : 0;
    return read_at(db, buf, db->page_size, (n - 1) * (uint64_t)db->page_size);
}

static inline uint32_t get2(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get4(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* An SQLite varint at p, not reading at or past end: its length (1..9), or 0 when it runs past end. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* ---------------------------------------------------------------- the leaf pages of a table */
/* One leaf as leaves() lists it: its page number and the rowids its interior pages allow it, (lo, hi]. */
typedef struct {
    uint32_t page;
    uint32_t bounded; /* bit 0: lo holds, bit 1: hi holds (else unbounded on that side) */
    int64_t lo, hi;
} leaf_t;

/* The cell pointers of a B-tree page: the array fits before the cell content area, which lies in the
 * usable part of the page. `first`: the size of the page header (8 for a leaf, 12 for an interior page). */
static int check_cells(db_t *db, const uint8_t *page, uint32_t hdr, uint32_t first, uint64_t n, uint32_t *content) {
    uint32_t ncells = get2(page + hdr + 3);
    uint32_t c = get2(page + hdr + 5);
    *content = c == 0 ? 65536 : c;
    if (hdr + first + 2 * (uint64_t)ncells > *content || *content > db->usable) {
        snprintf(db->why, sizeof db->why, "page %llu: its cells do not fit its header", (unsigned long long)n);
        return E_CORRUPT;
    }
    return OK;
}

/* The byte ranges [start, end) that a page's cells and free blocks take: they must not overlap, and the
 * bytes of the content area that none takes must be the page's count of fragmented bytes. */
typedef struct {
    uint32_t start, end;
} extent_t;

static int by_start(const void *a, const void *b) {
    uint32_t x = ((const extent_t *)a)->start, y = ((const extent_t *)b)->start;
    return x < y ? -1 : x > y;
}

/* The free blocks of a B-tree page (its chain ascending, inside the content area) added to `ext` (which holds the
 * page's `n` cells, in cell order), then the whole checked: nothing overlaps, and the fragmented bytes add up,
 * as SQLite computes free space and its integrity check counts fragments. */
static int check_free_space(db_t *db, const uint8_t *page, uint32_t hdr, uint32_t content, extent_t *ext, size_t n,
                            uint64_t pageno) {
    const uint32_t U = db->usable;
    size_t cells = n;
    uint32_t pc = get2(page + hdr + 1), next = 0, size = 0;
    if (pc && pc < content) goto bad;
    while (pc) {
        if (pc > U - 4) goto bad;
        next = get2(page + pc);
        size = get2(page + pc + 2);
        if (size < 4 || pc + size > U || n > U / 4) goto bad; /* (ext holds U / 4 + 1) */
        ext[n].start = pc;
        ext[n].end = pc + size;
        n++;
        if (next <= pc + size + 3) break;
        pc = next;
    }
    if (next > 0) goto bad;
    /* cells are usually laid out from the end of the page down, in cell order: then no sort is needed */
    int descending = n == cells;
    for (size_t i = 1; i < n && descending; i++) descending = ext[i].start < ext[i - 1].start;
    if (descending) {
        for (size_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
            extent_t t = ext[i];
            ext[i] = ext[j];
            ext[j] = t;
        }
    } else {
        qsort(ext, n, sizeof *ext, by_start);
    }
    uint64_t taken = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && ext[i].start < ext[i - 1].end) goto bad; /* two uses of one byte */
        taken += ext[i].end - ext[i].start;
    }
    if ((uint64_t)(U - content) - taken != page[hdr + 7]) goto bad;
    return OK;
bad:
    snprintf(db->why, sizeof db->why, "the cells and free space of page %llu do not add up",
             (unsigned long long)pageno);
    return E_CORRUPT;
}

static int walk_leaves(db_t *db, uint64_t root, buf_t *out) {
    enum { MAX_DEPTH = 64 };
    typedef struct {
        uint8_t *page;
        uint32_t hdr, ncells, next;
        leaf_t range; /* the rowids this page may hold */
    } level_t;
    level_t stack[MAX_DEPTH];
    uint8_t *pages[MAX_DEPTH + 1] = {0}; /* one page buffer per level, made when first needed */
    int depth = 0, rc = OK, leaf_depth = -1;
    uint64_t visited = 0;
    uint64_t n = root;
    leaf_t range = {0, 0, 0, 0}; /* of page n */
    extent_t *ext = malloc((db->usable / 4 + 1) * sizeof *ext); /* an interior page's cells and free blocks */
    if (!ext) return E_NOMEM;
    const uint8_t *end;
    for (;;) {
        /* descend into page n */
        if (++visited > db->npages) {
            snprintf(db->why, sizeof db->why, "the B-tree revisits pages (a loop)");
            rc = E_CORRUPT;
            goto done;
        }
        if (!pages[depth] && !(pages[depth] = malloc(db->page_size))) {
            rc = E_NOMEM;
            goto done;
        }
        uint8_t *page = pages[depth];
        uint32_t hdr, content;
        if ((rc = db_page(db, n, page, &hdr))) goto done;
        end = page + db->usable;
        uint8_t type = page[hdr];
        if (type == 0x0D) {
            if (leaf_depth < 0) leaf_depth = depth;
            if (depth != leaf_depth) {
                snprintf(db->why, sizeof db->why, "the B-tree's leaves lie at different depths");
                rc = E_CORRUPT;
                goto done;
            }
            if ((rc = buf_reserve(out, sizeof(leaf_t)))) goto done;
            range.page = (uint32_t)n;
            memcpy(out->p + out->len, &range, sizeof range);
            out->len += sizeof range;
        } else if (type == 0x05) {
            if (depth == MAX_DEPTH) {
                snprintf(db->why, sizeof db->why, "the B-tree is deeper than %d", MAX_DEPTH);
                rc = E_CORRUPT;
                goto done;
            }
            if ((rc = check_cells(db, page, hdr, 12, n, &content))) goto done;
            uint32_t ncells = get2(page + hdr + 3);
            /* each cell: a child page and the largest rowid under it, in ascending order within the range
             * this page may hold */
            leaf_t within = range;
            for (uint32_t i = 0; i < ncells; i++) {
                uint32_t off = get2(page + hdr + 12 + 2 * i);
                uint64_t key = 0;
                int klen = off < content || (uint64_t)off + 4 >= db->usable ? 0 : varint(page + off + 4, end, &key);
                if (!klen || ncells > db->usable / 4) {
                    snprintf(db->why, sizeof db->why, "a cell of page %llu lies outside it", (unsigned long long)n);
                    rc = E_CORRUPT;
                    goto done;
                }
                ext[i].start = off;
                ext[i].end = off + 4 + (uint32_t)klen;
                int64_t k = (int64_t)key;
                if (((within.bounded & 1) && k <= within.lo) || ((within.bounded & 2) && k > within.hi)) {
                    snprintf(db->why, sizeof db->why, "the keys of page %llu are out of order", (unsigned long long)n);
                    rc = E_CORRUPT;
                    goto done;
                }
                within.lo = k;
                within.bounded |= 1;
            }
            /* a cell dropped from the page (its subtree's rows with it) leaves bytes nothing accounts for */
            if ((rc = check_free_space(db, page, hdr, content, ext, ncells, n))) goto done;
            /* Every leaf of a B-tree lies at the same depth: when this page's right-most child is a leaf,
             * all its children are, and they are listed without reading them (read() checks each). */
            if (!pages[depth + 1] && !(pages[depth + 1] = malloc(db->page_size))) {
                rc = E_NOMEM;
                goto done;
            }
            uint32_t h2;
            if ((rc = db_page(db, get4(page + hdr + 8), pages[depth + 1], &h2))) goto done;
            stack[depth].next = 0;
            stack[depth].range = range;
            if (pages[depth + 1][h2] == 0x0D) {
                if (leaf_depth < 0) leaf_depth = depth + 1;
                if (depth + 1 != leaf_depth) {
                    snprintf(db->why, sizeof db->why, "the B-tree's leaves lie at different depths");
                    rc = E_CORRUPT;
                    goto done;
                }
                visited += ncells;
                if (visited > db->npages) {
                    snprintf(db->why, sizeof db->why, "the B-tree revisits pages (a loop)");
                    rc = E_CORRUPT;
                    goto done;
                }
                if ((rc = buf_reserve(out, sizeof(leaf_t) * ((size_t)ncells + 1)))) goto done;
                leaf_t child = range;
                for (uint32_t i = 0; i <= ncells; i++) {
                    const uint8_t *cell = page + get2(page + hdr + 12 + 2 * i);
                    if (i < ncells) {
                        uint64_t key = 0;
                        varint(cell + 4, end, &key); /* checked above */
                        child.page = get4(cell);
                        child.hi = (int64_t)key;
                        child.bounded |= 2;
                    } else {
                        child.page = get4(page + hdr + 8);
                        child.hi = range.hi;
                        child.bounded = (child.bounded & 1) | (range.bounded & 2);
                    }
                    memcpy(out->p + out->len, &child, sizeof child);
                    out->len += sizeof child;
                    child.lo = child.hi;
                    child.bounded |= 1;
                }
                stack[depth].next = ncells + 1; /* nothing left to descend into */
            }
            stack[depth].page = page;
            stack[depth].hdr = hdr;
            stack[depth].ncells = ncells;
            depth++;
        } else {
            snprintf(db->why, sizeof db->why, "page %llu is not a table B-tree page (type %u)",
                     (unsigned long long)n, type);
            rc = type == 0x02 || type == 0x0A ? E_UNSUPPORTED : E_CORRUPT;
            goto done;
        }
        /* the next child to visit, with the rowids it may hold: climb while the top interior page is
         * exhausted */
        for (;;) {
            if (depth == 0) goto done;
            level_t *top = &stack[depth - 1];
            const uint8_t *tend = top->page + db->usable;
            if (top->next <= top->ncells) {
                range = top->range;
                if (top->next > 0) { /* above the previous cell's key */
                    uint64_t key = 0;
                    varint(top->page + get2(top->page + top->hdr + 12 + 2 * (top->next - 1)) + 4, tend, &key);
                    range.lo = (int64_t)key;
                    range.bounded |= 1;
                }
                if (top->next < top->ncells) {
                    const uint8_t *cell = top->page + get2(top->page + top->hdr + 12 + 2 * top->next);
                    uint64_t key = 0;
                    varint(cell + 4, tend, &key);
                    n = get4(cell);
                    range.hi = (int64_t)key;
                    range.bounded |= 2;
                } else {
                    n = get4(top->page + top->hdr + 8); /* the right-most child */
                }
                top->next++;
                break;
            }
            depth--;
        }
    }
done:
    for (int i = 0; i <= MAX_DEPTH; i++) free(pages[i]);
    free(ext);
    return rc;
}

/* ---------------------------------------------------------------- columns */
typedef struct {
    int index;
    const uint8_t *bits;
    uint64_t nbits;
    int outside, null;
    int64_t base; /* the bitmap's bit 0 stands for this value */
} filter_t;

/* The value of integer serial type t (1..6, 8, 9) at p. */
static inline int64_t int_value(uint64_t t, const uint8_t *p) {
    switch (t) {
    case 1: return (int8_t)p[0];
    case 2: return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
    case 3: return ((int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8))) >> 8;
    case 4: return (int32_t)get4(p);
    case 5: return ((int64_t)((uint64_t)get2(p) << 48 | (uint64_t)get4(p + 2) << 16)) >> 16;
    case 6: return (int64_t)((uint64_t)get4(p) << 32 | get4(p + 4));
    case 8: return 0;
    default: return 1; /* 9 */
    }
}

static inline uint64_t serial_size(uint64_t t) {
    static const uint8_t small[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    return t < 12 ? small[t] : (t - 12) / 2;
}

#define MAX_COLUMNS 256

/* The size of the value of each one-byte serial type (0..127). */
static uint8_t SIZE1[128];

static void init_sizes(void) {
    for (uint64_t t = 0; t < 128; t++) SIZE1[t] = (uint8_t)serial_size(t);
}

/* What a column holds in a record too short to have it (a column added by ALTER TABLE ... ADD COLUMN after
 * the row was written): its declared default, as a serial type and the value's bytes (NULL: type 0). */
typedef struct {
    uint64_t type;
    const uint8_t *value;
} default_t;

/* Reads the rows of `leaves`, checking every structure it walks as SQLite's integrity check would for
 * what is read: the page type, the cell pointer array and content area, each cell inside the usable page
 * and apart from every other cell and free block, the page's count of fragmented bytes, rowids ascending and
 * inside the range the interior pages give the leaf, each record's header adding up to its payload exactly,
 * and no NULL in a NOT NULL column (`notnull`: a byte per record column). Anything else is E_CORRUPT. */
static inline int is_int(uint64_t t) { return (t >= 1 && t <= 6) || t == 8 || t == 9; }

static int read_rows(db_t *db, const leaf_t *leaves, size_t nleaves, result_t *r, const filter_t *filters,
                     int nfilters, const default_t *defaults, int ndefaults, const uint8_t *notnull, int nnotnull,
                     int start_col, int end_col) {
    int maxcol = 0;
    for (int i = 0; i < r->ncols; i++)
        if (r->cols[i].index > maxcol) maxcol = r->cols[i].index; /* (-1, the rowid, is no record column) */
    for (int i = 0; i < nfilters; i++)
        if (filters[i].index > maxcol) maxcol = filters[i].index;
    if (start_col > maxcol) maxcol = start_col;
    if (end_col > maxcol) maxcol = end_col;
    uint64_t types[MAX_COLUMNS];
    const uint8_t *where[MAX_COLUMNS];
    const uint32_t U = db->usable, PS = db->page_size;
    const uint64_t X = U - 35; /* the most payload a table leaf cell keeps on its page */
    /* Runs of consecutive leaf pages (an export writes its tables in order) are read with one pread
     * each, up to CHUNK bytes: no memory map, so a file cut short under us is an error, not a signal. */
    const size_t CHUNK = PS > (1u << 20) ? PS : (1u << 20);
    uint8_t *chunk = malloc(CHUNK);
    extent_t *ext = malloc((U / 4 + 1) * sizeof *ext); /* a page's cells and free blocks (4 bytes each at least) */
    if (!chunk || !ext) {
        free(chunk);
        free(ext);
        return E_NOMEM;
    }
    int rc = result_grow(r, 1); /* buffers even for no rows */
    int64_t row = 0;
    uint32_t pageno = 0;
    for (size_t k = 0; k < nleaves;) {
        size_t run = 1;
        while (k + run < nleaves && (run + 1) * PS <= CHUNK && leaves[k + run].page == leaves[k].page + run) run++;
        if (leaves[k].page < 1 || leaves[k].page + (uint64_t)run - 1 > db->npages) {
            snprintf(db->why, sizeof db->why, "page %u lies outside the file", leaves[k].page);
            rc = E_CORRUPT;
            goto out;
        }
        if ((rc = read_at(db, chunk, run * PS, (leaves[k].page - 1) * (uint64_t)PS))) goto out;
        for (size_t j = 0; j < run; j++, k++) {
            const uint8_t *page = chunk + j * PS;
            pageno = leaves[k].page;
            uint32_t hdr = pageno == 1 ? 100 : 0, content;
            const uint8_t *end = page + U;
            if (page[hdr] != 0x0D) {
                snprintf(db->why, sizeof db->why, "page %u is not a table leaf", pageno);
                rc = E_CORRUPT;
                goto out;
            }
            if ((rc = check_cells(db, page, hdr, 8, pageno, &content))) goto out;
            uint32_t ncells = get2(page + hdr + 3);
            if (row + ncells > r->cap && (rc = result_grow(r, row + ncells))) goto out;
            if (ncells > U / 4) goto corrupt;
            if (k == 0 && nleaves > 1) { /* room for every leaf as full as the first: growing by doubling instead
                                          * would copy each column about once more, into memory touched afresh */
                int64_t est = (int64_t)ncells * (int64_t)nleaves;
                if (est > r->cap && (rc = result_grow(r, est))) goto out;
            }
            int have_prev = (leaves[k].bounded & 1) != 0;
            int64_t prev = leaves[k].lo;
            for (uint32_t ci = 0; ci < ncells; ci++) {
                uint32_t off = get2(page + hdr + 8 + 2 * ci);
                if (off < content || off >= U) {
                    snprintf(db->why, sizeof db->why, "a cell of page %u lies outside it", pageno);
                    { rc = E_CORRUPT; goto out; }
                }
                const uint8_t *p = page + off;
                uint64_t payload, rowid;
                int n = varint(p, end, &payload);
                if (!n) goto corrupt;
                p += n;
                n = varint(p, end, &rowid);
                if (!n) goto corrupt;
                p += n;
                if ((have_prev && (int64_t)rowid <= prev) ||
                    ((leaves[k].bounded & 2) && (int64_t)rowid > leaves[k].hi)) {
                    snprintf(db->why, sizeof db->why, "rowid %lld of page %u is out of order", (long long)rowid,
                             pageno);
                    { rc = E_CORRUPT; goto out; }
                }
                have_prev = 1;
                prev = (int64_t)rowid;
                if (payload > X) {
                    snprintf(db->why, sizeof db->why, "a record spills onto overflow pages");
                    { rc = E_UNSUPPORTED; goto out; }
                }
                const uint8_t *rec_end = p + payload;
                if (rec_end > end) goto corrupt;
                /* the cell's bytes (4 at least, as SQLite counts them; overlaps are looked for per page) */
                uint32_t len = (uint32_t)(rec_end - (page + off));
                if (len < 4) len = 4;
                if (off + len > U) goto corrupt;
                ext[ci].start = off;
                ext[ci].end = off + len;
                uint64_t hsize;
                n = varint(p, rec_end, &hsize);
                if (!n || hsize < (uint64_t)n || hsize > payload) goto corrupt;
                const uint8_t *h = p + n, *hend = p + hsize;
                int col = 0;
                /* every column's serial type, not only those read: the sizes must add up to the payload. The
                 * columns read (up to maxcol) first, then the rest, summed only. */
                const uint64_t body = (uint64_t)(rec_end - hend);
                uint64_t at = 0; /* bytes of the body the columns so far take */
                for (; h < hend; col++) {
                    uint64_t t = *h;
                    if (t < 0x80) { /* a one-byte serial type: every integer and short text */
                        h++;
                    } else {
                        n = varint(h, hend, &t);
                        if (!n) goto corrupt;
                        h += n;
                    }
                    uint64_t sz = serial_size(t);
                    if (t == 10 || t == 11) t = 0; /* reserved: SQLite reads them as NULL */
                    if (t == 0 && col < nnotnull && notnull[col]) goto null;
                    if (sz > body - at) goto corrupt;
                    types[col] = t;
                    where[col] = hend + at;
                    at += sz;
                    if (col == maxcol) {
                        col++;
                        break;
                    }
                }
                while (h < hend) { /* the columns not read */
                    uint64_t t = *h;
                    if (t < 0x80) {
                        h++;
                        at += SIZE1[t];
                        if ((t == 0 || t == 10 || t == 11) && col < nnotnull && notnull[col]) goto null;
                    } else {
                        n = varint(h, hend, &t);
                        if (!n) goto corrupt;
                        h += n;
                        uint64_t sz = serial_size(t);
                        if (sz > body) goto corrupt;
                        at += sz;
                    }
                    col++;
                }
                if (at != body) goto corrupt;
                for (int c = col; c < nnotnull; c++) /* columns added after the row was written: their default */
                    if (notnull[c] && (c >= ndefaults || defaults[c].type == 0)) goto null;
                for (; col <= maxcol; col++) {
                    types[col] = col < ndefaults ? defaults[col].type : 0;
                    where[col] = col < ndefaults ? defaults[col].value : NULL;
                }
                int keep = 1;
                for (int f = 0; f < nfilters && keep; f++) {
                    uint64_t t = types[filters[f].index];
                    if (t == 0) {
                        keep = filters[f].null;
                    } else if ((t >= 1 && t <= 6) || t == 8 || t == 9) {
                        int64_t v = int_value(t, where[filters[f].index]);
                        /* (in unsigned arithmetic: a value below base wraps past the bitmap, as it must) */
                        uint64_t x = (uint64_t)v - (uint64_t)filters[f].base;
                        if (x < filters[f].nbits)
                            keep = (filters[f].bits[x >> 3] >> (x & 7)) & 1;
                        else
                            keep = filters[f].outside;
                    } else {
                        snprintf(db->why, sizeof db->why, "a filtered column holds a non-integer value");
                        { rc = E_UNSUPPORTED; goto out; }
                    }
                }
                if (!keep) continue;
                if (start_col >= 0 && end_col >= 0 && is_int(types[start_col]) && is_int(types[end_col]) &&
                    int_value(types[end_col], where[end_col]) < int_value(types[start_col], where[start_col])) {
                    snprintf(db->why, sizeof db->why, "rowid %lld of page %u ends before it starts", (long long)rowid,
                             pageno);
                    { rc = E_CORRUPT; goto out; }
                }
                for (int i = 0; i < r->ncols; i++) {
                    column_t *c = &r->cols[i];
                    if (c->index < 0) { /* the rowid */
                        int64_t x = (int64_t)rowid;
                        memcpy(c->data.p + row * 8, &x, 8);
                        continue;
                    }
                    uint64_t t = types[c->index];
                    const uint8_t *at = where[c->index];
                    if (c->kind == 'i') {
                        int64_t x = 0;
                        if (t == 0) {
                            if ((rc = column_set_null(c, row, r->cap))) goto out;
                        } else if ((t >= 1 && t <= 6) || t == 8 || t == 9) {
                            x = int_value(t, at);
                        } else {
                            snprintf(db->why, sizeof db->why, "column %d holds a non-integer value", c->index);
                            { rc = E_UNSUPPORTED; goto out; }
                        }
                        memcpy(c->data.p + row * 8, &x, 8);
                    } else {
                        size_t len = 0;
                        if (t == 0) {
                            if ((rc = column_set_null(c, row, r->cap))) goto out;
                        } else if (t >= 13 && (t & 1)) {
                            len = (size_t)serial_size(t);
                            if (c->data.len + len > INT32_MAX) {
                                snprintf(db->why, sizeof db->why, "over 2 GB of text in one read");
                                { rc = E_UNSUPPORTED; goto out; }
                            }
                            if (buf_reserve(&c->data, len)) { rc = E_NOMEM; goto out; }
                            memcpy(c->data.p + c->data.len, at, len);
                            c->data.len += len;
                        } else {
                            snprintf(db->why, sizeof db->why, "column %d holds a non-text value", c->index);
                            { rc = E_UNSUPPORTED; goto out; }
                        }
                        int32_t o = (int32_t)c->data.len;
                        memcpy(c->offs.p + (row + 1) * 4, &o, 4);
                    }
                }
                row++;
            }
            if ((rc = check_free_space(db, page, hdr, content, ext, ncells, pageno))) goto out;
            if (k == 0 && nleaves > 1) /* and as many bytes of text as the first leaf's in every leaf */
                for (int i = 0; i < r->ncols; i++) {
                    column_t *c = &r->cols[i];
                    if (c->kind == 'b' && c->data.len && (size_t)c->data.len * nleaves <= INT32_MAX &&
                        buf_reserve(&c->data, c->data.len * (nleaves - 1))) {
                        rc = E_NOMEM;
                        goto out;
                    }
                }
        }
    }
    r->rows = row;
out:
    free(chunk);
    free(ext);
    return rc;
corrupt:
    snprintf(db->why, sizeof db->why, "a record of page %u does not add up (header, sizes, payload)", pageno);
    rc = E_CORRUPT;
    goto out;
null:
    snprintf(db->why, sizeof db->why, "a record of page %u has NULL in a NOT NULL column", pageno);
    rc = E_CORRUPT;
    goto out;
}

/* ---------------------------------------------------------------- Python functions */
static PyObject *raise_for(int rc, const db_t *db, const char *path) {
    switch (rc) {
    case E_NOMEM: return PyErr_NoMemory();
    case E_UNSUPPORTED: PyErr_Format(Unsupported, "%s: %s", path, db->why); return NULL;
    case E_IO: PyErr_Format(PyExc_OSError, "%s: %s", path, db->why); return NULL;
    default: PyErr_Format(Corrupt, "%s: %s", path, db->why); return NULL;
    }
}

static PyObject *py_leaves(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj;
    unsigned long long root;
    if (!PyArg_ParseTuple(args, "O&K", PyUnicode_FSConverter, &path_obj, &root)) return NULL;
    const char *path = PyBytes_AsString(path_obj);
    db_t db;
    buf_t out = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = db_open(&db, path);
    if (rc == OK) rc = walk_leaves(&db, root, &out);
    db_close(&db);
    Py_END_ALLOW_THREADS
    PyObject *b = NULL;
    if (rc != OK)
        raise_for(rc, &db, path);
    else
        b = PyBytes_FromStringAndSize((const char *)out.p, (Py_ssize_t)out.len);
    free(out.p);
    Py_DECREF(path_obj);
    return b;
}

/* One zone of the rows just read into `r` (integer columns), appended to `out`: the rows (int64), then per
 * column its least and greatest value (int64; with no value: INT64_MAX, INT64_MIN), a mask with bit v set for
 * each value v in 0..63 (uint64) and flags (uint64: bit 0 a NULL seen, bit 1 a value outside 0..63 seen).
 * `r` is left ready for the next group's rows. */
static int zone_of(result_t *r, buf_t *out) {
    if (buf_reserve(out, 8 + 32 * (size_t)r->ncols)) return E_NOMEM;
    int64_t rows = r->rows;
    memcpy(out->p + out->len, &rows, 8);
    out->len += 8;
    for (int i = 0; i < r->ncols; i++) {
        column_t *c = &r->cols[i];
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        uint64_t mask = 0, flags = c->nulls ? 1 : 0;
        const int64_t *v = (const int64_t *)c->data.p;
        for (int64_t k = 0; k < rows; k++) {
            if (c->valid && !((c->valid[k >> 3] >> (k & 7)) & 1)) continue;
            int64_t x = v[k];
            if (x < lo) lo = x;
            if (x > hi) hi = x;
            if (x >= 0 && x < 64) mask |= (uint64_t)1 << x;
            else flags |= 2;
        }
        memcpy(out->p + out->len, &lo, 8);
        memcpy(out->p + out->len + 8, &hi, 8);
        memcpy(out->p + out->len + 16, &mask, 8);
        memcpy(out->p + out->len + 24, &flags, 8);
        out->len += 32;
        free(c->valid);
        c->valid = NULL;
        c->nulls = 0;
    }
    r->rows = 0;
    return OK;
}

static PyObject *py_read(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj, *leaves_obj, *columns, *kinds_obj, *filters_obj, *defaults_obj, *notnull_obj;
    unsigned long long group = 0;
    int start_col = -1, end_col = -1;
    if (!PyArg_ParseTuple(args, "O&OO!O!O!O!O!|Kii", PyUnicode_FSConverter, &path_obj, &leaves_obj, &PyTuple_Type,
                          &columns, &PyBytes_Type, &kinds_obj, &PyTuple_Type, &filters_obj, &PyTuple_Type,
                          &defaults_obj, &PyBytes_Type, &notnull_obj, &group, &start_col, &end_col))
        return NULL;
    if (start_col < -1 || start_col >= MAX_COLUMNS || end_col < -1 || end_col >= MAX_COLUMNS ||
        (start_col < 0) != (end_col < 0)) {
        PyErr_SetString(PyExc_ValueError, "the start and end columns are out of range");
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AsString(path_obj);
    Py_ssize_t ndefaults = PyTuple_Size(defaults_obj);
    Py_ssize_t ncols = PyTuple_Size(columns);
    Py_ssize_t nfilters = PyTuple_Size(filters_obj);
    char *kinds_in = PyBytes_AsString(kinds_obj);
    if (PyBytes_Size(kinds_obj) != ncols || ncols > MAX_COLUMNS || nfilters > MAX_COLUMNS ||
        ndefaults > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "columns and kinds differ in length, or too many columns");
        Py_DECREF(path_obj);
        return NULL;
    }
    /* the leaf list: copied, so the GIL can be let go */
    PyObject *leaves_bytes = PyBytes_FromObject(leaves_obj);
    if (!leaves_bytes) {
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_ssize_t nbytes = PyBytes_Size(leaves_bytes);
    leaf_t *leaves = malloc(nbytes ? (size_t)nbytes : sizeof(leaf_t));
    if (!leaves) {
        Py_DECREF(leaves_bytes);
        Py_DECREF(path_obj);
        return PyErr_NoMemory();
    }
    memcpy(leaves, PyBytes_AsString(leaves_bytes), (size_t)nbytes);
    Py_DECREF(leaves_bytes);
    size_t nleaves = (size_t)nbytes / sizeof(leaf_t);

    PyObject *capsule = NULL;
    result_t r = {0};
    filter_t *filters = calloc((size_t)nfilters + 1, sizeof *filters);
    PyObject **keep_alive = calloc((size_t)nfilters + (size_t)ndefaults + 1, sizeof *keep_alive);
    default_t *defaults = calloc((size_t)ndefaults + 1, sizeof *defaults);
    r.cols = calloc((size_t)ncols + 1, sizeof *r.cols);
    r.ncols = (int)ncols;
    char *kinds = malloc((size_t)ncols + 1);
    if (!filters || !keep_alive || !defaults || !r.cols || !kinds) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(kinds, kinds_in, (size_t)ncols);
    for (Py_ssize_t i = 0; i < ncols; i++) {
        long idx = PyLong_AsLong(PyTuple_GetItem(columns, i));
        if (idx == -1 && PyErr_Occurred()) goto fail;
        if (idx < -1 || idx >= MAX_COLUMNS || (kinds[i] != 'i' && kinds[i] != 'b') || (idx == -1 && kinds[i] != 'i')) {
            PyErr_SetString(PyExc_ValueError, "a column index or kind is out of range");
            goto fail;
        }
        r.cols[i].index = (int)idx;
        r.cols[i].kind = kinds[i];
    }
    for (Py_ssize_t i = 0; i < nfilters; i++) {
        PyObject *f = PyTuple_GetItem(filters_obj, i);
        PyObject *bits;
        int idx, outside, null;
        long long base = 0;
        if (!f || !PyArg_ParseTuple(f, "iO!pp|L", &idx, &PyBytes_Type, &bits, &outside, &null, &base)) goto fail;
        if (idx < 0 || idx >= MAX_COLUMNS) {
            PyErr_SetString(PyExc_ValueError, "a filter's column index is out of range");
            goto fail;
        }
        Py_INCREF(bits);
        keep_alive[i] = bits;
        filters[i].index = idx;
        filters[i].bits = (const uint8_t *)PyBytes_AsString(bits);
        filters[i].nbits = (uint64_t)PyBytes_Size(bits) * 8;
        filters[i].base = (int64_t)base;
        filters[i].outside = outside;
        filters[i].null = null;
    }
    /* defaults: None (NULL), an int (kept as an 8-byte integer, serial type 6) or bytes (text) */
    uint8_t (*ints)[8] = calloc((size_t)ndefaults + 1, 8);
    if (!ints) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < ndefaults; i++) {
        PyObject *d = PyTuple_GetItem(defaults_obj, i);
        if (d == Py_None) continue;
        if (PyLong_Check(d)) {
            long long x = PyLong_AsLongLong(d);
            if (x == -1 && PyErr_Occurred()) goto fail_ints;
            for (int b = 0; b < 8; b++) ints[i][b] = (uint8_t)((uint64_t)x >> (56 - 8 * b));
            defaults[i].type = 6;
            defaults[i].value = ints[i];
        } else if (PyBytes_Check(d)) {
            Py_INCREF(d);
            keep_alive[nfilters + i] = d;
            defaults[i].type = 13 + 2 * (uint64_t)PyBytes_Size(d);
            defaults[i].value = (const uint8_t *)PyBytes_AsString(d);
        } else {
            PyErr_SetString(PyExc_TypeError, "a default is None, an int or bytes");
            goto fail_ints;
        }
    }

    Py_ssize_t nnotnull = PyBytes_Size(notnull_obj);
    const uint8_t *notnull = (const uint8_t *)PyBytes_AsString(notnull_obj); /* (the tuple of args holds it) */
    db_t db;
    int rc;
    buf_t zones = {0};
    for (Py_ssize_t i = 0; group && i < ncols; i++)
        if (kinds[i] != 'i') {
            PyErr_SetString(PyExc_ValueError, "zones are of integer columns");
            goto fail_ints;
        }
    Py_BEGIN_ALLOW_THREADS
    rc = db_open(&db, path);
    if (rc == OK && !group)
        rc = read_rows(&db, leaves, nleaves, &r, filters, (int)nfilters, defaults, (int)ndefaults, notnull,
                       nnotnull > MAX_COLUMNS ? MAX_COLUMNS : (int)nnotnull, start_col, end_col);
    for (size_t g = 0; rc == OK && group && g < nleaves; g += group) {
        size_t n = nleaves - g < group ? nleaves - g : group;
        rc = read_rows(&db, leaves + g, n, &r, filters, (int)nfilters, defaults, (int)ndefaults, notnull,
                       nnotnull > MAX_COLUMNS ? MAX_COLUMNS : (int)nnotnull, start_col, end_col);
        if (rc == OK) rc = zone_of(&r, &zones);
    }
    db_close(&db);
    Py_END_ALLOW_THREADS
    if (rc != OK)
        raise_for(rc, &db, path);
    else if (group)
        capsule = PyBytes_FromStringAndSize((const char *)zones.p, (Py_ssize_t)zones.len);
    else
        capsule = result_to_capsule(&r, kinds);
    free(zones.p);
fail_ints:
    free(ints);
fail: /* (and the way out when it worked: capsule is set) */
    result_free(&r);
    if (keep_alive)
        for (Py_ssize_t i = 0; i < nfilters + ndefaults; i++) Py_XDECREF(keep_alive[i]);
    free(keep_alive);
    free(defaults);
    Py_DECREF(path_obj);
    free(filters);
    free(leaves);
    free(kinds);
    return capsule;
}

static PyMethodDef methods[] = {
    {"leaves", py_leaves, METH_VARARGS, "leaves(path, root) -> bytes: a table's leaf pages in rowid order"},
    {"read", py_read, METH_VARARGS,
     "read(path, leaves, columns, kinds, filters, defaults, notnull[, group, start, end]) -> an 'arrow_array_stream' "
     "capsule of the rows (with a group: their zones, bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sqlite_pages", "SQLite table B-tree pages read straight into Arrow arrays.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sqlite_pages(void) {
    init_sizes();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("_sqlite_pages.Unsupported", PyExc_ValueError, NULL);
    Corrupt = PyErr_NewException("_sqlite_pages.Corrupt", PyExc_ValueError, NULL);
    if (!Unsupported || !Corrupt || PyModule_AddObject(m, "Unsupported", Unsupported) < 0) {
        Py_XDECREF(m);
        return NULL;
    }
    Py_INCREF(Unsupported);
    if (PyModule_AddObject(m, "Corrupt", Corrupt) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(Corrupt);
    if (PyModule_AddIntConstant(m, "LEAF_SIZE", (long)sizeof(leaf_t)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
