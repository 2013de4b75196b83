/*
 * tests/engine/test_data: the feature schema (engine/io/schema.c), the
 * text: source (engine/io/text_source.c) and the schema's example stream
 * (engine/io/data.c), on real files and the real reader thread.
 *
 *   schema_refused  every refusal of a schema's text, each naming
 *                   origin:line and what is wrong; a file too long, missing
 *   schema_text     the canonical text parses back to the same schema (and
 *                   the same text); a shared table's features moved next to
 *                   the first (stable); differs names the first difference;
 *                   Criteo's preset and a file spelling it out are Criteo's;
 *                   FNV-1a 64 against the published test vectors
 *   line_refused    every refusal of a data line or header, each naming the
 *                   file, the line and the column: the batches before come
 *                   first, then the error from every later call
 *   criteo_equals   a Criteo TSV read through text: under a schema file
 *                   spelling out Criteo's layout equals criteo:, batch by
 *                   batch and array by array (memcmp), for 2 trainers,
 *                   training and eval; criteo: through ember_data equals
 *                   ember_criteo_data's batches
 *   features        a csv with a header in another order: lists, empty bags
 *                   (empty=bag), a shared table (its features adjacent),
 *                   string ids hashed (FNV-1a 64, the values computed by
 *                   Python), negative int ids mod rows as Python's %,
 *                   dense as given (none); epoch_examples
 *   dynamic_ids     kind=dynamic: raw ids (int at full width, either sign;
 *                   hex's 64 bits; a string's FNV-1a 64 bits), no mod; the
 *                   kind in the canonical text and in differs; an id past
 *                   int64 or 16 hex digits refused naming file, line and
 *                   column; Criteo's layout all dynamic is still Criteo's
 *                   and criteo: gives its raw ids
 *   multi_hot       multi_hot_sizes expand each one-id bag as
 *                   ember_data_multi_hot_row says, the same on every
 *                   trainer and epoch; sizes on a list feature refused
 *   multi_hot_ref   (argv: python, multi_hot_ref.py) ember_data_multi_hot_row
 *                   against NumPy's arithmetic, uniform and pareto
 *   hold            hold 2, read_ahead 1: two batches stay whole while the
 *                   reader runs ahead, a third is refused until one is
 *                   released
 *   bounded_memory  a list-feature file far larger than the ring streams
 *                   twice with the heap grown by the ring alone
 */
#include "engine/io/criteo_data.h"

#include "test_heap.h"
#include "test_util.h"

#include <ember/data.h>
#include <ember/schema.h>

#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ember-data-XXXXXX");
    CHECK(mkdtemp(dir), "mkdtemp");
    return 0;
}

/* @dir/@name holding @text; its path into @path. */
static int write_file(const char *name, const char *text, char *path, size_t length)
{
    snprintf(path, length, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    CHECK(file && fputs(text, file) >= 0 && fclose(file) == 0, "write %s", path);
    return 0;
}

static void remove_dir(void)
{
    char command[128];
    snprintf(command, sizeof(command), "rm -rf %s", dir);
    if (system(command) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static ember_schema_t *parse(const char *text)
{
    char err[512];
    ember_schema_t *s = NULL;
    if (ember_schema_parse(text, "t.schema", &s, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "parse: %s\n", err);
    return s;
}

/* ------------------------------------------------------------- schemas */

static int case_schema_refused(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
            {"label y\nbogus x", "t.schema:2: unknown statement 'bogus'"},
            {"label y\ndense 9$", "t.schema:2: a column's name '9$' is not 1 to 63"},
            {"label y\ndense a\n\ndense a", "t.schema:4: column 'a' named twice"},
            {"label a; dense a", "t.schema:1: column 'a' named twice"},
            {"dense a\n", "t.schema:2: no label statement"},
            {"label y # only", "t.schema:1: no feature"},
            {"label y\nsparse a int rows=10\nsparse b int rows=20 table=a",
             "t.schema:3: sparse feature 'b' shares table 'a' with 'a' but has other rows"},
            {"label y\nsparse a int rows=10\nsparse b hex rows=10 table=a pooling=mean",
             "t.schema:3: sparse feature 'b' shares table 'a' with 'a' but has another pooling"},
            {"label y\nsparse a", "t.schema:2: 'sparse' takes NAME"},
            {"label y\nsparse a int", "t.schema:2: sparse feature 'a': no rows="},
            {"label y\nsparse a int table=t", "t.schema:2: sparse feature 'a': no rows="},
            {"label y\nsparse a float rows=1", "t.schema:2: sparse feature 'a': ids 'float'"},
            {"label y\nsparse a int rows=0", "t.schema:2: sparse feature 'a': rows='0', not"},
            {"label y\nsparse a int rows=9223372036854775808",
             "t.schema:2: sparse feature 'a': rows='9223372036854775808', not"},
            {"label y\nsparse a int rows=-5", "t.schema:2: sparse feature 'a': rows='-5'"},
            {"label y\nsparse a int rows=5 list=|",
             "t.schema:2: sparse feature 'a': list= without"},
            {"label y\nsparse a int rows=5 bag=2", "t.schema:2: sparse feature 'a': bag= without"},
            {"label y\nsparse a int rows=5 list=| bag=65537",
             "t.schema:2: sparse feature 'a': bag="},
            {"label y\nsparse a int rows=5 list=| bag=0",
             "t.schema:2: sparse feature 'a': bag='0'"},
            {"label y\nsparse a int rows=5 list=ab bag=2",
             "t.schema:2: sparse feature 'a': list='ab'"},
            {"label y\nsparse a int rows=5 list== bag=2",
             "t.schema:2: sparse feature 'a': list='='"},
            {"format csv\nlabel y\nsparse a int rows=5 list=, bag=2",
             "t.schema:3: sparse feature 'a': list=',' is the field separator"},
            {"label y\nsparse a int rows=5 color=red",
             "t.schema:2: sparse feature 'a': unknown key"},
            {"label y\nsparse a int rows=5 rows=6",
             "t.schema:2: sparse feature 'a': rows= given twice"},
            {"label y\nsparse a int rows=5 pooling=avg",
             "t.schema:2: sparse feature 'a': pooling='avg'"},
            {"label y\nsparse a int rows=5 empty=maybe",
             "t.schema:2: sparse feature 'a': empty='maybe'"},
            {"label y\nsparse a int rows=5 table=x/y", "t.schema:2: a table's name 'x/y'"},
            {"label y\nsparse a int rows=5 kind=elastic",
             "t.schema:2: sparse feature 'a': kind='elastic', not fixed or dynamic"},
            {"label y\nsparse a int rows=5 kind=dynamic kind=fixed",
             "t.schema:2: sparse feature 'a': kind= given twice"},
            {"label y\nsparse a int rows=5 kind=dynamic\nsparse b int rows=5 table=a",
             "t.schema:3: sparse feature 'b' shares table 'a' with 'a' but has kind=fixed, not "
             "kind=dynamic"},
            {"format xml\nlabel y", "t.schema:1: format 'xml', not csv or tsv"},
            {"format tsv\nformat tsv", "t.schema:2: 'format' given twice"},
            {"header maybe", "t.schema:1: header 'maybe', not yes or no"},
            {"hash md5", "t.schema:1: hash 'md5', not fnv1a64"},
            {"label y\nlabel z", "t.schema:2: a second label ('z')"},
            {"label y\ndense a sqrt", "t.schema:2: dense feature 'a': 'sqrt' is not log"},
            {"label y\ndense a log none",
             "t.schema:2: dense feature 'a': its transform given twice"},
            {"label y\ndense a empty=bag", "t.schema:2: dense feature 'a': 'empty=bag' is not"},
            {"label\n", "t.schema:1: 'label' takes NAME"},
            {"label y\nskip", "t.schema:2: 'skip' takes NAME"},
            {"label y\ndense a b c d e f g h i j k l m", "t.schema:2: more than 12 words"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ember_schema_t *s = NULL;
        err[0] = '\0';
        ember_status_t status = ember_schema_parse(cases[i].text, "t.schema", &s, err, sizeof(err));
        CHECK(status == EMBER_ERR_FORMAT && s == NULL && strstr(err, cases[i].want),
              "'%s': status %d, '%s' lacks '%s'", cases[i].text, status, err, cases[i].want);
    }
    /* too many of a kind */
    static char text[EMBER_SCHEMA_TEXT_MAX];
    int used = snprintf(text, sizeof(text), "label y");
    for (int f = 0; f <= EMBER_SCHEMA_SPARSE_MAX; f++)
        used += snprintf(text + used, sizeof(text) - (size_t)used, "\nsparse s%d int rows=3", f);
    ember_schema_t *s = NULL;
    CHECK(ember_schema_parse(text, "t.schema", &s, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "t.schema:66: more than 64 sparse features"),
          "65 sparse: %s", err);
    /* files: too long, missing */
    char path[128];
    if (make_dir())
        return 1;
    memset(text, '#', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    if (write_file("long.schema", text, path, sizeof(path)))
        return 1;
    FILE *file = fopen(path, "a");
    CHECK(file && fputs("##", file) >= 0 && fclose(file) == 0, "append");
    CHECK(ember_schema_load(path, &s, err, sizeof(err)) == EMBER_ERR_FORMAT && strstr(err, path) &&
                  strstr(err, "longer than 65536 bytes"),
          "long file: %s", err);
    snprintf(path, sizeof(path), "%s/none.schema", dir);
    CHECK(ember_schema_load(path, &s, err, sizeof(err)) == EMBER_ERR_IO && strstr(err, path) &&
                  strstr(err, "No such file"),
          "missing file: %s", err);
    remove_dir();
    return 0;
}

static const char *names_of(const ember_schema_t *s, char *out, size_t length)
{
    ember_schema_sparse_t f;
    size_t used = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < ember_schema_num_sparse(s); i++) {
        ember_schema_sparse(s, i, &f);
        used += (size_t)snprintf(out + used, length - used, "%s%s:%s:%u", i ? " " : "", f.name,
                                 f.table, f.table_index);
    }
    return out;
}

/* @text's schema, then its canonical text parsed again: the same schema
 * and the same text. */
static int round_trip(const char *text, ember_schema_t **out)
{
    char canon[4096], again[4096], why[256];
    ember_schema_t *s = parse(text);
    CHECK(s, "'%s' refused", text);
    size_t length = ember_schema_text(s, canon, sizeof(canon));
    CHECK(length == strlen(canon) && length < sizeof(canon), "text of %zu bytes", length);
    CHECK(ember_schema_text(s, NULL, 0) == length, "the length without room");
    ember_schema_t *t = parse(canon);
    CHECK(t, "canonical '%s' refused", canon);
    CHECK(ember_schema_differs(s, t, why, sizeof(why)) == NULL, "'%s' differs: %s", canon, why);
    ember_schema_text(t, again, sizeof(again));
    CHECK(strcmp(canon, again) == 0, "'%s' then '%s'", canon, again);
    ember_schema_free(t);
    *out = s;
    return 0;
}

static const char movie_text[] =
        "format csv; header yes\n"
        "label click\ndense age none empty=refuse\nskip ts\n"
        "sparse movie int rows=50 table=items\n"
        "sparse genres int rows=7 list=| bag=4 empty=bag pooling=mean # tags\n"
        "sparse watched int rows=50 table=items list=: bag=3 empty=bag\n"
        "sparse user string rows=1000 empty=zero\n";

static int case_schema_text(void)
{
    char names[512], why[256], canon[4096];
    ember_schema_t *s, *t;
    if (round_trip(movie_text, &s))
        return 1;
    CHECK(strcmp(names_of(s, names, sizeof(names)),
                 "movie:items:0 watched:items:0 genres:genres:1 user:user:2") == 0,
          "batch order: %s", names);
    CHECK(ember_schema_num_sparse(s) == 4 && ember_schema_num_tables(s) == 3 &&
                  ember_schema_num_dense(s) == 1 && strcmp(ember_schema_label(s), "click") == 0,
          "counts");
    ember_schema_text(s, canon, sizeof(canon));
    CHECK(strcmp(canon, "format csv; header yes; hash fnv1a64; label click; dense age none "
                        "empty=refuse; skip ts; sparse movie int rows=50 table=items pooling=sum "
                        "empty=refuse; sparse genres int rows=7 table=genres pooling=mean list=| "
                        "bag=4 empty=bag; sparse watched int rows=50 table=items pooling=sum "
                        "list=: bag=3 empty=bag; sparse user string rows=1000 table=user "
                        "pooling=sum empty=zero") == 0,
          "canonical: '%s'", canon);
    static const struct {
        const char *from, *to, *want;
    } diffs[] = {
            {"format csv", "format tsv", "format csv, now tsv"},
            {"header yes", "header no", "header yes, now no"},
            {"label click", "label clk", "column 1: label 'click', now label 'clk'"},
            {"age none", "age log", "dense feature 'age': none, now log"},
            {"age none empty=refuse", "age none",
             "dense feature 'age': empty=refuse, now "
             "empty=zero"},
            {"skip ts", "dense ts", "column 3: skip 'ts', now dense 'ts'"},
            {"movie int", "movie string", "sparse feature 'movie': int ids, now string"},
            {"user string rows=1000", "user string rows=1001",
             "sparse feature 'user': rows 1000, "
             "now 1001"},
            {"genres int rows=7", "genres int rows=7 table=g",
             "sparse feature 'genres': table "
             "'genres', now 'g'"},
            {"pooling=mean", "pooling=max", "sparse feature 'genres': pooling mean, now max"},
            {"list=: bag=3", "list=| bag=3", "sparse feature 'watched': list ':', now '|'"},
            {"bag=4", "bag=6", "sparse feature 'genres': bag 4, now 6"},
            {"list=| bag=4 ", "", "sparse feature 'genres': list '|', now '-'"},
            {"user string rows=1000 empty=zero", "user string rows=1000",
             "sparse feature 'user': empty=zero, now empty=refuse"},
            {"\nsparse user string rows=1000 empty=zero", "", "7 columns, now 6"},
            {"user string rows=1000", "user string rows=1000 kind=dynamic",
             "sparse feature 'user': kind=fixed, now kind=dynamic"},
    };
    for (size_t i = 0; i < sizeof(diffs) / sizeof(diffs[0]); i++) {
        char now[1024];
        const char *at = strstr(movie_text, diffs[i].from);
        CHECK(at, "'%s' not in the schema", diffs[i].from);
        snprintf(now, sizeof(now), "%.*s%s%s", (int)(at - movie_text), movie_text, diffs[i].to,
                 at + strlen(diffs[i].from));
        CHECK((t = parse(now)), "'%s'", now);
        const char *got = ember_schema_differs(s, t, why, sizeof(why));
        CHECK(got == why && strcmp(why, diffs[i].want) == 0, "'%s': '%s', not '%s'", now,
              got ? why : "(same)", diffs[i].want);
        ember_schema_free(t);
    }
    CHECK(!ember_schema_is_criteo(s), "a movie schema is not Criteo's");
    ember_schema_free(s);

    /* Criteo's preset, and a file spelling it out (other rows) */
    int64_t rows[26];
    for (int f = 0; f < 26; f++)
        rows[f] = 1000 + f;
    CHECK(ember_schema_criteo(rows, &s, why, sizeof(why)) == EMBER_OK && ember_schema_is_criteo(s),
          "preset: %s", why);
    ember_schema_sparse_t f;
    ember_schema_dense_t d;
    ember_schema_sparse(s, 25, &f);
    ember_schema_dense(s, 12, &d);
    CHECK(strcmp(f.name, "C26") == 0 && strcmp(f.table, "t_cat_25") == 0 && f.rows == 1025 &&
                  f.ids == EMBER_IDS_HEX && f.empty == EMBER_EMPTY_ZERO && f.bag_max == 1 &&
                  f.list == '\0' && f.table_index == 25 && f.pooling == EMBER_BAG_SUM,
          "C26");
    CHECK(strcmp(d.name, "I13") == 0 && d.transform == EMBER_DENSE_LOG && !d.empty_refused, "I13");
    ember_schema_text(s, canon, sizeof(canon));
    CHECK((t = parse(canon)) && ember_schema_is_criteo(t), "the preset's text: '%s'", canon);
    ember_schema_free(t);
    rows[3] = 0;
    CHECK(ember_schema_criteo(rows, &t, why, sizeof(why)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(why, "feature C4's table has 0 rows"),
          "rows 0: %s", why);
    CHECK((t = parse("label label; dense I1; sparse C1 hex rows=5 table=t_cat_0 empty=zero")) &&
                  !ember_schema_is_criteo(t),
          "one feature is not Criteo's");
    ember_schema_free(t);
    ember_schema_free(s);
    CHECK(ember_schema_criteo(NULL, &s, why, sizeof(why)) == EMBER_OK, "%s", why);
    ember_schema_sparse(s, 0, &f);
    CHECK(f.rows == 100000, "default rows %" PRId64, f.rows);
    ember_schema_free(s);

    /* FNV-1a 64: the published test vectors (www.isthe.com/chongo/tech/comp/fnv) */
    CHECK(ember_schema_hash64("", 0) == 0xcbf29ce484222325ULL &&
                  ember_schema_hash64("a", 1) == 0xaf63dc4c8601ec8cULL &&
                  ember_schema_hash64("foobar", 6) == 0x85944171f73967e8ULL,
          "fnv1a64");
    return 0;
}

/* ------------------------------------------------------------- streams */

static ember_data_config_t config_of(const char *source, const ember_schema_t *schema,
                                     uint32_t trainer, uint32_t trainers, uint32_t batch, int eval)
{
    return (ember_data_config_t){.source = source,
                                 .schema = schema,
                                 .trainer = trainer,
                                 .trainers = trainers,
                                 .batch = batch,
                                 .eval = eval};
}

#define LINE_SCHEMA                                                                           \
    "label y\ndense d\nsparse i int rows=10\nsparse h hex rows=10\nsparse s string rows=10\n" \
    "sparse l int rows=10 list=| bag=3\nsparse e int rows=10 list=| bag=2 empty=refuse\n"
#define GOOD_LINE "1\t2\t3\tab\tfoo\t1|2\t4\n"

/* @data (after a good first line) read under @schema_text: the first batch,
 * then an error naming the file and @want, twice. */
static int line_refused(const char *schema_text, const char *data, const char *want)
{
    char path[128], spec[160], err[1024] = "";
    ember_data_t *d;
    ember_data_batch_t b;
    ember_schema_t *s = parse(schema_text);
    CHECK(s, "schema");
    if (write_file("bad.tsv", data, path, sizeof(path)))
        return 1;
    snprintf(spec, sizeof(spec), "text:%s", path);
    ember_data_config_t c = config_of(spec, s, 0, 1, 1, 1);
    ember_status_t status = ember_data_open(&c, &d, err, sizeof(err));
    if (status == EMBER_OK) {
        CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 1, "%s: %s", want,
              err);
        for (int again = 0; again < 2; again++) {
            err[0] = '\0';
            status = ember_data_next(d, &b, err, sizeof(err));
            CHECK(status == EMBER_ERR_FORMAT, "'%s': status %d: %s", want, status, err);
        }
        ember_data_close(d);
    }
    CHECK(status == EMBER_ERR_FORMAT && strstr(err, path) && strstr(err, want),
          "status %d, '%s' lacks '%s'", status, err, want);
    ember_schema_free(s);
    return 0;
}

static int case_line_refused(void)
{
    static const struct {
        const char *line, *want;
    } lines[] = {
            {"1\t2\t1|2\tab\tfoo\t1\t4\n", ":2: column i: '1|2': a list where one id is expected"},
            {"1\t2\t1,2\tab\tfoo\t1\t4\n", ":2: column i: '1,2': a list where one id is expected"},
            {"1\t2\t3\ta b\tfoo\t1\t4\n", ":2: column h: 'a b': a list where one id is expected"},
            {"1\t2\tabc\tab\tfoo\t1\t4\n", ":2: column i: 'abc' is not a decimal integer within "
                                           "64 bits (int ids)"},
            {"1\t2\t9223372036854775808\tab\tfoo\t1\t4\n", ":2: column i: '9223372036854775808' "
                                                           "is out of int64's range"},
            {"1\t2\t3\txyz\tfoo\t1\t4\n", ":2: column h: 'xyz' is not 1 to 16 hexadecimal digits "
                                          "(hex ids)"},
            {"1\t2\t3\t11112222333344445\tfoo\t1\t4\n", ":2: column h: '11112222333344445' is "
                                                        "not 1 to 16 hexadecimal"},
            {"1\t2\t3\tab\tfoo\t1|2|3|4\t4\n", ":2: column l: a bag of 4 values, more than its "
                                               "bound 3"},
            {"1\t2\t3\tab\tfoo\t1||2\t4\n", ":2: column l: '1||2': an empty value in the list"},
            {"1\t2\t3\tab\tfoo\t1|x\t4\n", ":2: column l: 'x' is not a decimal integer"},
            {"1\t2\t3\tab\tfoo\t1\t\n", ":2: column e: an empty bag where the schema forbids it"},
            {"1\t2\t\tab\tfoo\t1\t4\n", ":2: column i: an empty bag where the schema forbids it"},
            {"1\t2\t3\tab\tfoo\t1\n", ":2: column e: missing (6 fields, not 7)"},
            {"1\t2\t3\tab\tfoo\t1\t4\t5\n", ":2: column 8: past the last (8 fields, not 7)"},
            {"2\t2\t3\tab\tfoo\t1\t4\n", ":2: column y: '2', not 0 or 1 (the label)"},
            {"\t2\t3\tab\tfoo\t1\t4\n", ":2: column y: '', not 0 or 1"},
            {"1\t2x\t3\tab\tfoo\t1\t4\n", ":2: column d: '2x' is not a finite number"},
            {"1\tnan\t3\tab\tfoo\t1\t4\n", ":2: column d: 'nan' is not a finite number"},
    };
    if (make_dir())
        return 1;
    char data[256];
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        snprintf(data, sizeof(data), GOOD_LINE "%s", lines[i].line);
        if (line_refused(LINE_SCHEMA, data, lines[i].want))
            return 1;
    }
    /* dense: empty=refuse, a value past a float (none) */
    if (line_refused("label y\ndense d none empty=refuse\nsparse i int rows=3\n",
                     "1\t2\t0\n1\t\t0\n",
                     ":2: column d: an empty field where the schema forbids") ||
        line_refused("label y\ndense d none\nsparse i int rows=3\n", "1\t2\t0\n1\t1e300\t0\n",
                     ":2: column d: '1e300' does not fit a float"))
        return 1;
    /* headers, refused at open: an unknown column, a missing one, one twice */
    static const char header_schema[] =
            "format csv\nheader yes\nlabel y\ndense d\nsparse i int rows=10\n";
    if (line_refused(header_schema, "y,d,i,zz\n1,2,3,4\n", ":1: column 'zz': not in the schema") ||
        line_refused(header_schema, "y,i\n1,3\n", ":1: column d: missing from the header") ||
        line_refused(header_schema, "y,d,y,i\n1,2,1,3\n", ":1: column 'y': twice in the header") ||
        line_refused(header_schema, "", ":1: no header line"))
        return 1;
    remove_dir();
    return 0;
}

/* Criteo lines as test_criteo_data's generator makes them: empty fields,
 * negative counts, ids past 2^31. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int write_criteo(const char *name, uint64_t first, uint64_t count, char *path, size_t length)
{
    snprintf(path, length, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    CHECK(file, "cannot write %s", path);
    for (uint64_t i = first; i < first + count; i++) {
        fprintf(file, "%d", (int)(mix(i) % 2));
        for (int f = 0; f < 13; f++) {
            uint64_t h = mix(i * 13 + (uint64_t)f);
            if (h % 8 == 0)
                fprintf(file, "\t");
            else
                fprintf(file, "\t%lld", h % 8 == 1 ? -1LL : (long long)((h >> 16) % 3000));
        }
        for (int f = 0; f < 26; f++) {
            uint64_t h = mix(i * 26 + (uint64_t)f + 100000);
            if (h % 8 == 0)
                fprintf(file, "\t");
            else
                fprintf(file, "\t%08llx", (unsigned long long)(h >> 32));
        }
        fprintf(file, "\n");
    }
    CHECK(fclose(file) == 0, "close %s", path);
    return 0;
}

/* Two batches the same, array by array. */
static int same_batch(const ember_data_batch_t *a, const ember_data_batch_t *b, uint32_t N,
                      uint64_t s)
{
    CHECK(a->n == b->n && a->first_example == b->first_example &&
                  a->kjt.num_values == b->kjt.num_values &&
                  a->kjt.num_features == b->kjt.num_features && a->kjt.batch_size == a->n &&
                  b->kjt.batch_size == b->n && !a->kjt.lengths && !b->kjt.lengths,
          "batch %" PRIu64 ": n %zu/%zu, first %" PRIu64 "/%" PRIu64 ", values %zu/%zu", s, a->n,
          b->n, a->first_example, b->first_example, a->kjt.num_values, b->kjt.num_values);
    size_t n = a->n, K = a->kjt.num_features;
    CHECK(memcmp(a->labels, b->labels, n * sizeof(float)) == 0, "batch %" PRIu64 ": labels", s);
    CHECK(memcmp(a->dense, b->dense, n * N * sizeof(float)) == 0, "batch %" PRIu64 ": dense", s);
    CHECK(memcmp(a->kjt.offsets, b->kjt.offsets, (K * n + 1) * sizeof(int64_t)) == 0,
          "batch %" PRIu64 ": offsets", s);
    CHECK(memcmp(a->kjt.values, b->kjt.values, a->kjt.num_values * sizeof(int64_t)) == 0,
          "batch %" PRIu64 ": values", s);
    return 0;
}

static int case_criteo_equals(void)
{
    char a[128], b[128], schema_path[128], text_spec[300], criteo_spec[300], err[1024];
    static char schema_text[8192];
    int64_t rows[26];
    if (make_dir() || write_criteo("day_0", 0, 41, a, sizeof(a)) ||
        write_criteo("day_1", 41, 30, b, sizeof(b)))
        return 1;
    int used = snprintf(schema_text, sizeof(schema_text),
                        "# Criteo's layout, spelled out\n"
                        "format tsv\nheader no\nlabel label\n");
    for (int i = 1; i <= 13; i++)
        used += snprintf(schema_text + used, sizeof(schema_text) - (size_t)used,
                         "dense I%d log empty=zero\n", i);
    for (int f = 0; f < 26; f++) {
        rows[f] = f == 0 ? (int64_t)1 << 40 : 1000 + 7 * f;
        used += snprintf(schema_text + used, sizeof(schema_text) - (size_t)used,
                         "sparse C%d hex rows=%" PRId64 " table=t_cat_%d empty=zero\n", f + 1,
                         rows[f], f);
    }
    if (write_file("criteo.schema", schema_text, schema_path, sizeof(schema_path)))
        return 1;
    ember_schema_t *s;
    CHECK(ember_schema_load(schema_path, &s, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_schema_is_criteo(s), "the spelled-out schema is Criteo's");
    snprintf(text_spec, sizeof(text_spec), "text:%s,%s", a, b);
    snprintf(criteo_spec, sizeof(criteo_spec), "criteo:%s,%s", a, b);
    for (int eval = 0; eval <= 1; eval++)
        for (uint32_t t = 0; t < 2; t++) {
            ember_data_t *x, *y;
            ember_criteo_data_t *z;
            ember_data_config_t cx = config_of(text_spec, s, t, 2, 5, eval);
            ember_data_config_t cy = config_of(criteo_spec, s, t, 2, 5, eval);
            ember_criteo_data_config_t cz = {.source = criteo_spec,
                                             .trainer = t,
                                             .trainers = 2,
                                             .batch = 5,
                                             .rows = rows,
                                             .eval = eval};
            CHECK(ember_data_open(&cx, &x, err, sizeof(err)) == EMBER_OK, "text: %s", err);
            CHECK(ember_data_open(&cy, &y, err, sizeof(err)) == EMBER_OK, "criteo: %s", err);
            CHECK(ember_criteo_data_open(&cz, &z, err, sizeof(err)) == EMBER_OK, "%s", err);
            uint64_t batches = 0;
            for (int epoch = 0; epoch < 2; epoch++)
                for (;; batches++) {
                    ember_data_batch_t bx, by;
                    ember_criteo_batch_t bz;
                    CHECK(ember_data_next(x, &bx, err, sizeof(err)) == EMBER_OK &&
                                  ember_data_next(y, &by, err, sizeof(err)) == EMBER_OK &&
                                  ember_criteo_data_next(z, &bz, err, sizeof(err)) == EMBER_OK,
                          "%s", err);
                    if (same_batch(&bx, &by, 13, batches))
                        return 1;
                    CHECK(bz.n == by.n && bz.first_example == by.first_example &&
                                  (bz.n == 0 ||
                                   (memcmp(bz.labels, by.labels, bz.n * 4) == 0 &&
                                    memcmp(bz.dense, by.dense, bz.n * 13 * 4) == 0 &&
                                    memcmp(bz.sparse[0], by.kjt.values, bz.n * 26 * 8) == 0 &&
                                    bz.sparse[25] == bz.sparse[0] + 25 * bz.n)),
                          "ember_criteo_data's batch %" PRIu64 " differs", batches);
                    if (bx.n == 0)
                        break;
                    for (size_t k = 0; k <= 26 * bx.n; k++)
                        CHECK(bx.kjt.offsets[k] == (int64_t)k, "one id a bag: offset %zu", k);
                }
            uint64_t want = eval ? 2 * (((t ? 35 : 36) + 4) / 5) : 2 * (71 / 10);
            CHECK(batches == want, "trainer %u eval %d: %" PRIu64 " batches, not %" PRIu64, t, eval,
                  batches, want);
            CHECK(ember_data_epoch_examples(x) == 71 && ember_data_epoch_examples(y) == 71,
                  "epoch examples");
            ember_data_close(x);
            ember_data_close(y);
            ember_criteo_data_close(z);
        }
    /* criteo: under another schema, refused naming why */
    ember_schema_t *other = parse("label label; dense I1; sparse C1 hex rows=5");
    ember_data_t *d = NULL;
    ember_data_config_t c = config_of(criteo_spec, other, 0, 1, 5, 0);
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && !d &&
                  strstr(err, "is not Criteo's preset (1 sparse features, not 26"),
          "%s", err);
    ember_schema_free(other);
    ember_schema_free(s);
    remove_dir();
    return 0;
}

static const char movie_schema[] = "format csv\nheader yes\nlabel click\ndense age none\n"
                                   "sparse movie int rows=50 table=items\n"
                                   "sparse genres int rows=7 list=| bag=4 empty=bag\n"
                                   "sparse watched int rows=50 table=items list=: bag=3 empty=bag\n"
                                   "sparse user string rows=1000\n";

static int case_features(void)
{
    char path[128], spec[160], err[1024];
    ember_data_t *d;
    ember_data_batch_t b;
    if (make_dir() || write_file("movies.csv",
                                 "user,watched,click,movie,genres,age\r\n"
                                 "alice,3:-4,1,7,1|2|3,2.5\r\n"
                                 "bob,,0,-1,,0\n"
                                 "carol,60:61:-9223372036854775808,1,120,9,-3.5\n",
                                 path, sizeof(path)))
        return 1;
    ember_schema_t *s = parse(movie_schema);
    CHECK(s, "schema");
    snprintf(spec, sizeof(spec), "text:%s", path);
    ember_data_config_t c = config_of(spec, s, 0, 1, 4, 1);
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 3, "%s", err);
    /* batch order movie, watched (table items), genres, user; user's rows
     * from Python: fnv1a64(b"alice") % 1000 == 183, b"bob" 92, b"carol" 962
     * (h = 0xcbf29ce484222325; h = ((h ^ byte) * 0x100000001b3) % 2**64) */
    static const int64_t values[] = {7,   49, 20,         /* movie: -1 % 50 */
                                     3,   46, 10, 11, 42, /* watched: -4, 60, -2^63 */
                                     1,   2,  3,  2,      /* genres: 9 % 7 */
                                     183, 92, 962};       /* user */
    static const int64_t offsets[] = {0, 1, 2, 3, 5, 5, 8, 11, 11, 12, 13, 14, 15};
    static const float labels[] = {1, 0, 1}, age[] = {2.5f, 0.0f, -3.5f};
    CHECK(b.kjt.num_features == 4 && b.kjt.batch_size == 3 && b.kjt.num_values == 15, "shape");
    for (size_t i = 0; i < 15; i++)
        CHECK(b.kjt.values[i] == values[i], "value %zu: %" PRId64 ", not %" PRId64, i,
              b.kjt.values[i], values[i]);
    for (size_t i = 0; i < 13; i++)
        CHECK(b.kjt.offsets[i] == offsets[i], "offset %zu: %" PRId64, i, b.kjt.offsets[i]);
    CHECK(memcmp(b.labels, labels, sizeof(labels)) == 0 && memcmp(b.dense, age, sizeof(age)) == 0,
          "labels, dense");
    CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 0 &&
                  b.first_example == 3 && ember_data_epoch_examples(d) == 3,
          "epoch end: %s", err);
    ember_data_close(d);
    ember_schema_free(s);
    remove_dir();
    return 0;
}

/* kind=dynamic: raw ids for each id type (no mod), kind in the canonical
 * text, a dynamic Criteo layout still Criteo's; the refusals. */
static int case_dynamic_ids(void)
{
    static const char schema_text[] = "label y\ndense d\n"
                                      "sparse i int rows=10 kind=dynamic\n"
                                      "sparse h hex rows=10 kind=dynamic\n"
                                      "sparse s string rows=10 kind=dynamic empty=zero\n"
                                      "sparse l int rows=10 list=| bag=3 kind=dynamic empty=bag\n"
                                      "sparse f int rows=10\n";
    char path[128], spec[160], err[1024], canon[2048];
    ember_data_t *d;
    ember_data_batch_t b;
    ember_schema_t *s = parse(schema_text), *t;
    CHECK(s, "schema");
    for (uint32_t f = 0; f < 5; f++)
        CHECK(ember_schema_dynamic(s, f) == (f < 4), "feature %u's kind", f);
    ember_schema_text(s, canon, sizeof(canon));
    CHECK(strstr(canon, "sparse i int rows=10 table=i pooling=sum empty=refuse kind=dynamic; ") &&
                  strstr(canon, "sparse f int rows=10 table=f pooling=sum empty=refuse") &&
                  !strstr(canon, "kind=fixed"),
          "canonical: '%s'", canon);
    CHECK((t = parse(canon)) && !ember_schema_differs(s, t, err, sizeof(err)), "round trip");
    ember_schema_free(t);
    if (make_dir() ||
        write_file(
                "dyn.tsv",
                "1\t0\t-1\tffffffffffffffff\tfoo\t9223372036854775807|-9223372036854775808|12\t-1\n"
                "0\t0\t123456789012\t0a\t\t\t23\n",
                path, sizeof(path)))
        return 1;
    snprintf(spec, sizeof(spec), "text:%s", path);
    ember_data_config_t c = config_of(spec, s, 0, 1, 2, 1);
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 2, "%s", err);
    /* fnv1a64(b"foo") from Python: 0xdcb27518fed9d577, as int64 bits; an
     * empty string field of empty=zero: key 0; f (fixed): -1 % 10, 23 % 10 */
    const int64_t values[] = {-1, 123456789012, -1,        10, (int64_t)0xdcb27518fed9d577ULL,
                              0,  INT64_MAX,    INT64_MIN, 12, 9,
                              3};
    static const int64_t offsets[] = {0, 1, 2, 3, 4, 5, 6, 9, 9, 10, 11};
    CHECK(b.kjt.num_values == 11, "%zu values", b.kjt.num_values);
    for (size_t i = 0; i < 11; i++)
        CHECK(b.kjt.values[i] == values[i], "value %zu: %" PRId64 ", not %" PRId64, i,
              b.kjt.values[i], values[i]);
    for (size_t i = 0; i < 11; i++)
        CHECK(b.kjt.offsets[i] == offsets[i], "offset %zu: %" PRId64, i, b.kjt.offsets[i]);
    ember_data_close(d);
    /* the refusals: an int past int64 (either sign), 17 hex digits */
    static const char good[] = "1\t0\t1\t1\tx\t1\t1\n";
    static const struct {
        const char *line, *want;
    } lines[] = {
            {"1\t0\t9223372036854775808\t1\tx\t1\t1\n",
             ":2: column i: '9223372036854775808' is out of int64's range"},
            {"1\t0\t-9223372036854775809\t1\tx\t1\t1\n",
             ":2: column i: '-9223372036854775809' is out of int64's range"},
            {"1\t0\t1\t1\tx\t1|99999999999999999999\t1\n",
             ":2: column l: '99999999999999999999' is out of int64's range"},
            {"1\t0\t1\t10000000000000000\tx\t1\t1\n",
             ":2: column h: '10000000000000000' is not 1 to 16 hexadecimal digits"},
            {"1\t0\t1x\t1\tx\t1\t1\n", ":2: column i: '1x' is not a decimal integer"},
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char data[256];
        snprintf(data, sizeof(data), "%s%s", good, lines[i].line);
        if (line_refused(schema_text, data, lines[i].want))
            return 1;
    }
    ember_schema_free(s);
    /* Criteo's layout with every table dynamic: still Criteo's (criteo:
     * reads it, its ids raw), and it differs from the preset by kind */
    ember_schema_t *criteo, *all;
    CHECK(ember_schema_criteo(NULL, &criteo, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_schema_all_dynamic(criteo, &all) == EMBER_OK && ember_schema_is_criteo(all) &&
                  ember_schema_dynamic(all, 25),
          "all dynamic");
    const char *why = ember_schema_differs(criteo, all, err, sizeof(err));
    CHECK(why && strcmp(why, "sparse feature 'C1': kind=fixed, now kind=dynamic") == 0, "%s",
          why ? why : "(same)");
    char cpath[128], cspec[160];
    char line[512];
    int used = snprintf(line, sizeof(line), "1");
    for (int f = 0; f < 13; f++)
        used += snprintf(line + used, sizeof(line) - (size_t)used, "\t%d", f);
    for (int f = 0; f < 26; f++)
        used += snprintf(line + used, sizeof(line) - (size_t)used, "\t%s",
                         f == 0   ? "fedcba9876543210"
                         : f == 1 ? ""
                                  : "deadbeef");
    snprintf(line + used, sizeof(line) - (size_t)used, "\n");
    if (write_file("criteo.tsv", line, cpath, sizeof(cpath)))
        return 1;
    snprintf(cspec, sizeof(cspec), "criteo:%s", cpath);
    for (int dyn = 0; dyn <= 1; dyn++) {
        c = config_of(cspec, dyn ? all : criteo, 0, 1, 1, 1);
        CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "criteo: %s", err);
        CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 1, "%s", err);
        int64_t want0 = dyn ? (int64_t)0xfedcba9876543210ULL
                            : (int64_t)(0xfedcba9876543210ULL % 100000),
                want2 = dyn ? 0xdeadbeef : 0xdeadbeef % 100000;
        CHECK(b.kjt.values[0] == want0 && b.kjt.values[1] == 0 && b.kjt.values[2] == want2,
              "criteo dynamic %d: %" PRId64 " %" PRId64 " %" PRId64, dyn, b.kjt.values[0],
              b.kjt.values[1], b.kjt.values[2]);
        ember_data_close(d);
    }
    ember_schema_free(all);
    ember_schema_free(criteo);
    remove_dir();
    return 0;
}

static int case_multi_hot(void)
{
    char path[128], spec[160], err[1024];
    static char data[64 * 1024];
    int used = 0;
    if (make_dir())
        return 1;
    for (int i = 0; i < 40; i++)
        used += snprintf(data + used, sizeof(data) - (size_t)used, "%d\t%d\t%d\t%s\n", i % 2,
                         i * 37, i % 5, i % 3 ? "" : "x");
    if (write_file("hot.tsv", data, path, sizeof(path)))
        return 1;
    ember_schema_t *s = parse("label y\nsparse a int rows=100000\nsparse b int rows=5\n"
                              "sparse c string rows=9 empty=bag\n");
    CHECK(s, "schema");
    snprintf(spec, sizeof(spec), "text:%s", path);
    static const uint32_t sizes[] = {5, 1, 3};
    for (int dist = 0; dist < 2; dist++)
        for (uint32_t t = 0; t < 2; t++) {
            ember_data_t *d;
            ember_data_batch_t b;
            ember_data_config_t c = config_of(spec, s, t, 2, 4, 0);
            c.multi_hot_sizes = sizes;
            c.multi_hot_dist = (ember_multi_hot_dist_t)dist;
            c.multi_hot_seed = 77;
            CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
            for (int epoch = 0; epoch < 2; epoch++) {
                uint64_t batches = 0;
                while (ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n) {
                    batches++;
                    const int64_t *o = b.kjt.offsets, *v = b.kjt.values;
                    for (size_t j = 0; j < b.n; j++) {
                        uint64_t i = b.first_example + 2 * j;
                        int64_t a0 = (int64_t)i * 37, start = o[j];
                        CHECK(o[j + 1] - start == 5 && v[start] == a0,
                              "a's bag of example %" PRIu64, i);
                        for (uint32_t k = 1; k < 5; k++)
                            CHECK(v[start + k] ==
                                          ember_data_multi_hot_row(77, 0, a0, k, 100000,
                                                                   (ember_multi_hot_dist_t)dist),
                                  "example %" PRIu64 " value %u", i, k);
                        CHECK(o[b.n + j + 1] - o[b.n + j] == 1 && v[o[b.n + j]] == (int64_t)i % 5,
                              "b (size 1) of %" PRIu64, i);
                        int64_t want = i % 3 ? 0 : 3; /* an empty bag stays empty */
                        CHECK(o[2 * b.n + j + 1] - o[2 * b.n + j] == want,
                              "c of %" PRIu64 ": %" PRId64, i, o[2 * b.n + j + 1] - o[2 * b.n + j]);
                    }
                }
                CHECK(batches == 5 && b.n == 0, "epoch %d: %" PRIu64 " batches: %s", epoch, batches,
                      err);
            }
            ember_data_close(d);
        }
    ember_schema_t *lists = parse("label y\nsparse a int rows=10 list=| bag=2\n");
    ember_data_t *d = NULL;
    ember_data_config_t c = config_of(spec, lists, 0, 1, 4, 0);
    static const uint32_t two[] = {2};
    c.multi_hot_sizes = two;
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && !d &&
                  strstr(err, "feature 'a' is a list (list=| bag=2): multi-hot sizes are for "
                              "one-id features"),
          "%s", err);
    static const uint32_t zero[] = {0, 1, 1};
    c = config_of(spec, s, 0, 1, 4, 0);
    c.multi_hot_sizes = zero;
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && !d &&
                  strstr(err, "feature 'a': multi-hot size 0"),
          "%s", err);
    ember_schema_free(lists);
    ember_schema_free(s);
    remove_dir();
    return 0;
}

static int case_multi_hot_ref(void)
{
    char command[1024], dist[16];
    CHECK(test_argc >= 2, "usage: test_data multi_hot_ref PYTHON multi_hot_ref.py");
    snprintf(command, sizeof(command), "'%s' '%s'", test_argv[0], test_argv[1]);
    FILE *pipe = popen(command, "r");
    CHECK(pipe, "popen %s", command);
    uint64_t seed, row;
    uint32_t feature, j;
    int64_t rows, value;
    size_t lines = 0, pareto = 0;
    while (fscanf(pipe, "%15s %" SCNu64 " %" SCNu32 " %" SCNu64 " %" SCNu32 " %" SCNd64 " %" SCNd64,
                  dist, &seed, &feature, &row, &j, &rows, &value) == 7) {
        int is_pareto = strcmp(dist, "pareto") == 0;
        int64_t got = ember_data_multi_hot_row(seed, feature, (int64_t)row, j, rows,
                                               is_pareto ? EMBER_MULTI_HOT_PARETO
                                                         : EMBER_MULTI_HOT_UNIFORM);
        CHECK(got == value,
              "%s seed %" PRIu64 " feature %u row %" PRIu64 " j %u rows %" PRId64 ": %" PRId64
              ", numpy %" PRId64,
              dist, seed, feature, row, j, rows, got, value);
        lines++;
        pareto += is_pareto;
    }
    CHECK(pclose(pipe) == 0 && lines == 1080 && pareto == 540, "%zu lines from %s", lines, command);
    return 0;
}

/* A file of @lines examples: label, a list of i % 4 values (i, i+1, ...). */
static int write_lists(const char *name, uint64_t lines, char *path, size_t length)
{
    snprintf(path, length, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    CHECK(file, "write %s", path);
    for (uint64_t i = 0; i < lines; i++) {
        fprintf(file, "%d\t%llu\t", (int)(i % 2), (unsigned long long)i);
        for (uint64_t k = 0; k < i % 4; k++)
            fprintf(file, "%s%llu", k ? "|" : "", (unsigned long long)(i + k));
        fprintf(file, "\n");
    }
    CHECK(fclose(file) == 0, "close");
    return 0;
}

/* Example @j of @b is example @i of write_lists's file. */
static int check_list_example(const ember_data_batch_t *b, size_t j, uint64_t i)
{
    const int64_t *o = b->kjt.offsets, *v = b->kjt.values;
    size_t n = b->n;
    CHECK(v[o[j]] == (int64_t)i && o[j + 1] - o[j] == 1, "example %zu is not %" PRIu64, j, i);
    CHECK(o[n + j + 1] - o[n + j] == (int64_t)(i % 4), "example %" PRIu64 "'s bag", i);
    for (int64_t k = 0; k < o[n + j + 1] - o[n + j]; k++)
        CHECK(v[o[n + j] + k] == (int64_t)(i + (uint64_t)k) % 1000, "example %" PRIu64, i);
    CHECK(b->labels[j] == (float)(i % 2), "label of %" PRIu64, i);
    return 0;
}

static const char list_schema[] =
        "label y\nsparse id int rows=1000000000\nsparse l int rows=1000 list=| bag=3 empty=bag\n";

static int case_hold(void)
{
    char path[128], spec[160], err[1024];
    ember_data_batch_t b1, b2, b3;
    if (make_dir() || write_lists("l.tsv", 40, path, sizeof(path)))
        return 1;
    ember_schema_t *s = parse(list_schema);
    snprintf(spec, sizeof(spec), "text:%s", path);
    ember_data_config_t c = config_of(spec, s, 0, 1, 4, 0);
    c.hold = 2;
    c.read_ahead = 1;
    ember_data_t *d;
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_data_take(d, &b1, err, sizeof(err)) == EMBER_OK &&
                  ember_data_take(d, &b2, err, sizeof(err)) == EMBER_OK,
          "%s", err);
    usleep(20000); /* the reader fills its one slot and waits */
    CHECK(ember_data_take(d, &b3, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "2 batches held"),
          "a third take: %s", err);
    for (size_t j = 0; j < 4; j++)
        if (check_list_example(&b1, j, j) || check_list_example(&b2, j, 4 + j))
            return 1;
    /* the reader holds one batch ready at most: the end is far */
    CHECK(ember_data_epoch_examples(d) == 0, "epoch examples before the end");
    CHECK(ember_data_release(d) == EMBER_OK, "release");
    CHECK(ember_data_take(d, &b3, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (size_t j = 0; j < 4; j++)
        if (check_list_example(&b2, j, 4 + j) || check_list_example(&b3, j, 8 + j))
            return 1;
    uint64_t s_ = 3;
    for (; ember_data_next(d, &b1, err, sizeof(err)) == EMBER_OK && b1.n; s_++)
        for (size_t j = 0; j < 4; j++)
            if (check_list_example(&b1, j, 4 * s_ + j))
                return 1;
    CHECK(s_ == 10 && b1.n == 0, "%" PRIu64 " batches: %s", s_, err);
    /* the end held nothing: the last batch alone is held */
    CHECK(ember_data_epoch_examples(d) == 40 && ember_data_release(d) == EMBER_OK &&
                  ember_data_release(d) == EMBER_ERR_INVALID_PARAM,
          "releases");
    ember_data_close(d);
    ember_schema_free(s);
    remove_dir();
    return 0;
}

static int case_bounded_memory(void)
{
    enum {
        LINES = 150000,
        BATCH = 32,
        READ_AHEAD = 2,
        LINE_BUFFER = (1 << 20) + 16 * 1024 + 1
    };
    char path[128], spec[160], err[1024];
    struct stat st;
    ember_data_batch_t b;
    CHECK(test_heap_one_arena(), "mallopt");
    if (make_dir() || write_lists("big.tsv", LINES, path, sizeof(path)))
        return 1;
    ember_schema_t *s = parse(list_schema);
    snprintf(spec, sizeof(spec), "text:%s", path);
    ember_data_config_t c = config_of(spec, s, 0, 1, BATCH, 0);
    c.read_ahead = READ_AHEAD;
    /* B x (4 + 8 (1 + 3) + 8 K) + 8 bytes a slot, the line reader's buffer */
    size_t ring = (READ_AHEAD + 1) * (BATCH * (4 + 8 * 4 + 8 * 2) + 8);
    size_t slack = 64 * 1024;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size > 2 * (LINE_BUFFER + ring + slack),
          "the file (%lld bytes) is far larger than the ring", (long long)st.st_size);
    ember_data_t *d;
    size_t before = test_heap_bytes();
    CHECK(ember_data_open(&c, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == BATCH, "%s", err);
    size_t opened = test_heap_bytes(), peak = opened;
    CHECK(opened >= before + ring && opened <= before + ring + LINE_BUFFER + slack,
          "open took %zu bytes, the ring is %zu", opened - before, ring);
    for (int e = 0; e < 2; e++) {
        uint64_t batches = e == 0;
        for (; ember_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n; batches++) {
            size_t now = test_heap_bytes();
            peak = now > peak ? now : peak;
            for (size_t j = 0; j < b.n; j++)
                if (check_list_example(&b, j, b.first_example + j))
                    return 1;
        }
        CHECK(batches == LINES / BATCH && b.n == 0, "epoch %d: %" PRIu64 " batches: %s", e, batches,
              err);
    }
    CHECK(peak <= opened + slack, "the heap grew by %zu bytes while streaming", peak - opened);
    ember_data_close(d);
    CHECK(test_heap_bytes() <= before + slack, "close left %zu bytes", test_heap_bytes() - before);
    ember_schema_free(s);
    remove_dir();
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"schema_refused", case_schema_refused},
            {"schema_text", case_schema_text},
            {"line_refused", case_line_refused},
            {"criteo_equals", case_criteo_equals},
            {"features", case_features},
            {"dynamic_ids", case_dynamic_ids},
            {"multi_hot", case_multi_hot},
            {"multi_hot_ref", case_multi_hot_ref},
            {"hold", case_hold},
            {"bounded_memory", case_bounded_memory},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
