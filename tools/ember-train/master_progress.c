/*
 * tools/ember-train/master_progress: the progress lines between the epoch
 * lines (see master.h).
 *
 * The trainers report where they stand after the steps the master names
 * (PROGRESS, messages.h): the first two in TRAIN_START, each later one in
 * the answers, so every trainer reports the same steps.  A report is held
 * until every trainer has reported that step; then the master sums them
 * (every trainer's examples, every trainer's losses of the epoch so far),
 * prints a line when one is due, and answers them all with the step after
 * the next, which a trainer needs only once it reaches the next: the
 * trainers go on meanwhile, and a trainer may be at most one report ahead
 * of the slowest.
 *
 * --log-every N: the steps are N's multiples (the job's count), a line at
 * each.  Otherwise a line every --log-every-seconds S (10) at the first
 * report after S seconds since the last line; the reports come about every
 * S/4 seconds, spaced by the rate of the steps so far (every step at
 * first).  --log-every 0: no reports.
 *
 * A line: the step, the epoch and how much of it is done (where the
 * model's epoch_steps hook knows the epoch's size: any trainer that knows
 * it), the examples a second of every trainer since the last line (or the
 * trainers' start), the running mean loss (every trainer's losses since the
 * epoch began, over their count: at an epoch's last step the epoch line's
 * mean loss) and the epoch's time left at the steps' rate since the last
 * line.  On a terminal it is one line redrawn in place, hidden while any
 * other line of the master's is printed; elsewhere a line each time.  The
 * same figures go to --metrics as {"progress": STEP, ...}.
 *
 * A report that cannot be (master_progress's checks, messages.c's) is
 * refused naming the trainer, with a warning, and the lines stop: every
 * report held or to come is answered "no more".
 */
#include "tools/ember-train/master.h"

#include <ember/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the terminal ------------------------------------------------------------------ */

/* @text drawn over the line the cursor is on, cut to the terminal's width
 * (a wrapped line would not be redrawn in place). */
static void draw(master_progress_t *p)
{
    struct winsize ws;
    int width = (int)strlen(p->text);
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && width >= ws.ws_col)
        width = ws.ws_col - 1;
    printf("\r\033[K%.*s", width, p->text);
    fflush(stdout);
    p->drawn = 1;
}

void master_progress_hide(master_t *m)
{
    master_progress_t *p = &m->progress;
    if (!p->drawn)
        return;
    fputs("\r\033[K", stdout);
    fflush(stdout);
    p->drawn = 0;
}

void master_progress_show(master_t *m)
{
    master_progress_t *p = &m->progress;
    if (p->tty && p->text[0] && !p->drawn)
        draw(p);
}

/* ---- a line --------------------------------------------------------------------------- */

/* @seconds as "42s", "12m05s", "3h07m". */
static void duration_text(double seconds, char *out, size_t length)
{
    const unsigned long long s = (unsigned long long)(seconds + 0.5);
    if (s < 60)
        snprintf(out, length, "%llus", s);
    else if (s < 3600)
        snprintf(out, length, "%llum%02llus", s / 60, s % 60);
    else
        snprintf(out, length, "%lluh%02llum", s / 3600, s / 60 % 60);
}

/* The figures of the reports of step p->at, every trainer's in. */
typedef struct {
    uint32_t epoch;
    uint64_t epoch_steps, size, examples, loss_steps;
    double loss_sum;
} point_t;

static point_t point_sum(const master_t *m)
{
    const master_progress_t *p = &m->progress;
    point_t s = {.epoch = p->got[0].epoch, .epoch_steps = p->got[0].epoch_steps};
    for (int t = 0; t < m->tj->settings.trainers; t++) {
        const train_msg_progress_t *r = &p->got[t];
        s.size = r->epoch_size > s.size ? r->epoch_size : s.size;
        s.examples += r->examples;
        s.loss_sum += r->loss_sum;
        s.loss_steps += r->epoch_steps;
    }
    return s;
}

static void print_line(master_t *m, const point_t *s, double now)
{
    master_progress_t *p = &m->progress;
    const char *what = m->model->unit;
    const double seconds = now - p->line_time;
    /* the rate as printed, whole: the line and --metrics give the same figure */
    const double per_s =
            seconds > 0 ? floor((double)(s->examples - p->line_examples) / seconds + 0.5) : 0.0;
    const double steps_s = seconds > 0 ? (double)(p->at - p->line_steps) / seconds : 0.0;
    const double loss = s->loss_sum / (double)s->loss_steps;
    const int known = s->size > 0;
    const double fraction = known ? (double)s->epoch_steps / (double)s->size : 0.0;
    const int timed = known && steps_s > 0;
    const double left = timed ? (double)(s->size - s->epoch_steps) / steps_s : 0.0;
    char done[32] = "", eta[48] = "", left_text[24];
    if (known)
        snprintf(done, sizeof(done), " %.1f%%", 100.0 * fraction);
    if (timed) {
        duration_text(left, left_text, sizeof(left_text));
        snprintf(eta, sizeof(eta), "  %s left", left_text);
    }
    snprintf(p->text, sizeof(p->text), "step %llu  epoch %u%s  %s/s %.0f  mean loss %.4f%s",
             (unsigned long long)p->at, s->epoch + 1, done, what, per_s, loss, eta);
    if (p->tty) {
        draw(p);
    } else {
        printf("%s\n", p->text);
        fflush(stdout);
    }
    if (m->metrics) {
        char fraction_text[48] = "", left_json[48] = "";
        if (known)
            snprintf(fraction_text, sizeof(fraction_text), ", \"epoch_fraction\": %.6f", fraction);
        if (timed)
            snprintf(left_json, sizeof(left_json), ", \"seconds_left\": %.3f", left);
        fprintf(m->metrics,
                "{\"progress\": %llu, \"progress_epoch\": %u%s, \"%s_per_s\": %.3f, "
                "\"running_loss\": %.9f%s}\n",
                (unsigned long long)p->at, s->epoch + 1, fraction_text, what, per_s, loss,
                left_json);
        fflush(m->metrics);
    }
    p->line_time = now;
    p->line_steps = p->at;
    p->line_examples = s->examples;
}

/* ---- the reports ---------------------------------------------------------------------- */

/* The step after p->after to report at: N on, or about a quarter of the
 * period at the steps' rate since the last report. */
static uint64_t next_report(master_t *m, double now)
{
    master_progress_t *p = &m->progress;
    if (m->tj->log_every)
        return p->after + m->tj->log_every;
    const double seconds = now - p->point_time;
    const double rate = seconds > 0 ? (double)(p->at - p->point_steps) / seconds : 0.0;
    double gap = rate * m->tj->log_every_seconds / 4;
    gap = gap < 1 ? 1 : gap > 1e12 ? 1e12 : gap;
    return p->after + (uint64_t)gap;
}

/* Every held report answered with @next (0: no more). */
static void answer_all(master_t *m, uint64_t next)
{
    master_progress_t *p = &m->progress;
    const ember_iov_t iov = {&next, sizeof(next)};
    for (int t = 0; t < m->tj->settings.trainers; t++) {
        if (p->held[t])
            ember_rpc_reply(p->held[t], EMBER_OK, &iov, 1);
        p->held[t] = NULL;
    }
    p->count = 0;
}

/* Every trainer has reported p->at: a line when one is due, the answers. */
static void point_done(master_t *m)
{
    master_progress_t *p = &m->progress;
    const double now = now_s();
    const point_t s = point_sum(m);
    if (m->tj->log_every || now - p->line_time >= m->tj->log_every_seconds)
        print_line(m, &s, now);
    const uint64_t next = next_report(m, now);
    p->point_time = now;
    p->point_steps = p->at;
    p->at = p->after;
    p->after = next;
    answer_all(m, next);
}

/* Why report @r cannot be the one p->at wants; NULL when it may. */
static const char *report_wrong(const master_t *m, const train_msg_progress_t *r, char *why,
                                size_t length)
{
    const master_progress_t *p = &m->progress;
    const train_msg_progress_t *first = NULL;
    for (int t = 0; t < m->tj->settings.trainers && !first; t++)
        first = p->held[t] ? &p->got[t] : NULL;
    if (r->steps != p->at)
        snprintf(why, length, "step %llu reported, %llu asked for", (unsigned long long)r->steps,
                 (unsigned long long)p->at);
    else if (p->held[r->trainer])
        snprintf(why, length, "step %llu reported twice", (unsigned long long)r->steps);
    else if (r->examples < p->examples[r->trainer])
        snprintf(why, length, "%llu examples trained, fewer than the %llu reported before",
                 (unsigned long long)r->examples, (unsigned long long)p->examples[r->trainer]);
    else if (first && (r->epoch != first->epoch || r->epoch_steps != first->epoch_steps))
        snprintf(why, length, "step %llu of epoch %u, trainer%u's is step %llu of epoch %u",
                 (unsigned long long)r->epoch_steps, r->epoch + 1, first->trainer,
                 (unsigned long long)first->epoch_steps, first->epoch + 1);
    else
        return NULL;
    return why;
}

static void on_progress(ember_rpc_req_t *req, void *arg)
{
    master_t *m = arg;
    master_progress_t *p = &m->progress;
    train_msg_progress_t r;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[256], why[160];
    if (!p->on) { /* the lines stopped: no more reports */
        const uint64_t none = 0;
        ember_rpc_reply(req, EMBER_OK, &(ember_iov_t){&none, sizeof(none)}, 1);
        return;
    }
    ember_status_t status = train_progress_unpack(data, length, (uint32_t)m->tj->settings.trainers,
                                                  m->epochs, &r, err, sizeof(err));
    if (status == EMBER_OK && report_wrong(m, &r, why, sizeof(why)))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_BAD_MESSAGE,
                                   "trainer%u's progress report: %s", r.trainer, why);
    if (status != EMBER_OK) {
        master_progress_hide(m);
        ember_warn("master", "%s; no more progress lines", err);
        ember_rpc_reply_error(req, status, "%s", err);
        p->on = 0;
        answer_all(m, 0);
        return;
    }
    p->got[r.trainer] = r;
    p->held[r.trainer] = req;
    p->examples[r.trainer] = r.examples;
    if (++p->count == m->tj->settings.trainers)
        point_done(m);
}

/* ---- set-up and end ------------------------------------------------------------------ */

ember_status_t master_progress_create(master_t *m)
{
    master_progress_t *p = &m->progress;
    const int trainers = m->tj->settings.trainers;
    p->tty = isatty(STDOUT_FILENO);
    p->held = calloc((size_t)trainers, sizeof(*p->held));
    p->got = calloc((size_t)trainers, sizeof(*p->got));
    p->examples = calloc((size_t)trainers, sizeof(*p->examples));
    if (!p->held || !p->got || !p->examples)
        return EMBER_ERR_NO_MEMORY;
    return ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_PROGRESS, on_progress, m);
}

void master_progress_start(master_t *m, uint64_t start_step, double now, uint64_t report_at[2])
{
    master_progress_t *p = &m->progress;
    const uint64_t every = m->tj->log_every;
    const int off = every == 0 && ember_flag_value(m->tj->given, m->tj->ngiven, "--log-every");
    p->on = !off;
    p->at = off ? 0 : every ? (start_step / every + 1) * every : start_step + 1;
    p->after = off ? 0 : p->at + (every ? every : 1);
    p->line_time = p->point_time = now;
    p->line_steps = p->point_steps = start_step;
    report_at[0] = p->at;
    report_at[1] = p->after;
}

void master_progress_end(master_t *m)
{
    master_progress_hide(m);
    m->progress.text[0] = '\0';
}

void master_progress_destroy(master_t *m)
{
    master_progress_t *p = &m->progress;
    /* Its state goes with the master's frame: a late report finds no handler. */
    ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_PROGRESS, NULL, NULL);
    if (p->held)
        answer_all(m, 0);
    master_progress_end(m);
    free(p->held);
    free(p->got);
    free(p->examples);
}
