/* The printed table, the JSON file beside it, the goal tally and the PyTorch figures. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static const char *const goal_text[GOAL_COUNT] = {
    [GOAL_DEV_ALLOC] = "1: cached device alloc+free <= 0.5 us and >= 100x cudaMalloc+cudaFree",
    [GOAL_PINNED_ALLOC] = "2: cached pinned alloc+free <= 1 us at every size",
    [GOAL_SYNC_BW] = "3: blob sync >= 95% of raw pinned cudaMemcpy from 16 MiB up",
    [GOAL_ACCESS] = "4: an access needing no copy <= 20 ns",
    [GOAL_UPDATE] = "6: blob_update within 5% of cublasSaxpy at every size",
    [GOAL_LOOP_DRIVER] = "7: no driver allocs or frees after warm-up",
    [GOAL_LOOP_RESERVED] = "7: reserved / peak in use <= 1.25",
    [GOAL_OPTIM] = "8: optimizer step >= 90% of D2D copy bandwidth, no slower than PyTorch fused",
    [GOAL_IM2COL] = "C: im2col 256x64x56x56 k3 >= 70% of D2D copy bandwidth",
};

#define MAX_META 32
static struct {
    char key[32];
    char value[224];
} meta[MAX_META];
static int n_meta;

static FILE *json;
static bool json_first_section = true, json_first_row;
static int n_cols;
static int col_width[REPORT_MAX_COLS];
static int goal_rows[GOAL_COUNT], goal_missed[GOAL_COUNT];
static int n_errors;

#define LABEL_WIDTH 32

static void json_string(const char *s)
{
    fputc('"', json);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(json, "\\%c", c);
        else if (c < 0x20)
            fprintf(json, "\\u%04x", c);
        else
            fputc(c, json);
    }
    fputc('"', json);
}

void report_meta(const char *key, const char *fmt, ...)
{
    if (n_meta == MAX_META)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(meta[n_meta].value, sizeof meta[n_meta].value, fmt, ap);
    va_end(ap);
    snprintf(meta[n_meta].key, sizeof meta[n_meta].key, "%s", key);
    printf("%-10s %s\n", key, meta[n_meta].value);
    n_meta++;
}

void report_env(const char *const *vars, int n, const char *none)
{
    char env[224] = "";
    for (int i = 0; i < n; i++)
        if (getenv(vars[i]))
            snprintf(env + strlen(env), sizeof env - strlen(env), "%s=%s ", vars[i],
                     getenv(vars[i]));
    report_meta("env", "%s", *env ? env : none);
}

const char *report_meta_value(const char *key)
{
    for (int i = 0; i < n_meta; i++)
        if (!strcmp(meta[i].key, key))
            return meta[i].value;
    return "";
}

void report_open(const char *path)
{
    json = fopen(path, "w");
    if (!json) {
        perror(path);
        n_errors++;
        return;
    }
    printf("%-10s %s\n", "results", path);
    fputs("{\n  \"meta\": {", json);
    for (int i = 0; i < n_meta; i++) {
        fputs(i ? ",\n    " : "\n    ", json);
        json_string(meta[i].key);
        fputs(": ", json);
        json_string(meta[i].value);
    }
    fputs("\n  },\n  \"sections\": [", json);
}

static void json_end_section(void)
{
    if (json && !json_first_section)
        fputs("\n    ]}", json);
}

void report_section(const char *id, const char *title, int ncols, const char *const *cols)
{
    n_cols = ncols < REPORT_MAX_COLS ? ncols : REPORT_MAX_COLS;
    printf("\n%s. %s\n%-*s", id, title, LABEL_WIDTH, "");
    for (int c = 0; c < n_cols; c++) {
        int w = (int)strlen(cols[c]);
        col_width[c] = (w > 9 ? w : 9) + 2;
        printf("%*s", col_width[c], cols[c]);
    }
    printf("  goal\n");
    if (!json)
        return;
    json_end_section();
    fputs(json_first_section ? "\n    {\"id\": " : ",\n    {\"id\": ", json);
    json_first_section = false;
    json_string(id);
    fputs(", \"title\": ", json);
    json_string(title);
    fputs(", \"columns\": [", json);
    for (int c = 0; c < n_cols; c++) {
        if (c)
            fputs(", ", json);
        json_string(cols[c]);
    }
    fputs("], \"rows\": [", json);
    json_first_row = true;
}

/* Start a row of the section's JSON with "key": text, if the file is open. */
static bool json_begin_row(const char *key, const char *text)
{
    if (!json)
        return false;
    fputs(json_first_row ? "\n      {" : ",\n      {", json);
    json_first_row = false;
    json_string(key);
    fputs(": ", json);
    json_string(text);
    return true;
}

void report_note(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("  %s\n", buf);
    if (json_begin_row("note", buf))
        fputc('}', json);
}

static const char *fmt_value(double v, char buf[32])
{
    if (isnan(v))
        return "-";
    double a = fabs(v);
    bool whole = v == floor(v); /* counts */
    snprintf(buf, 32,
             a >= 1e5 || whole ? "%.0f"
             : a >= 100        ? "%.1f"
             : a >= 10         ? "%.2f"
                               : "%.3f",
             v);
    return buf;
}

void report_row(const char *label, const double *v, bench_goal goal, bool pass)
{
    char buf[32];
    printf("%-*s", LABEL_WIDTH, label);
    for (int c = 0; c < n_cols; c++)
        printf("%*s", col_width[c], fmt_value(v[c], buf));
    if (goal != GOAL_NONE) {
        goal_rows[goal]++;
        goal_missed[goal] += !pass;
        printf("  %s", pass ? "PASS" : "MISS");
    }
    putchar('\n');
    fflush(stdout);
    if (!json_begin_row("label", label))
        return;
    fputs(", \"values\": [", json);
    for (int c = 0; c < n_cols; c++)
        fprintf(json, isnan(v[c]) ? "%snull" : "%s%.6g", c ? ", " : "", v[c]);
    fputc(']', json);
    if (goal != GOAL_NONE) {
        fputs(", \"goal\": ", json);
        json_string(goal_text[goal]);
        fprintf(json, ", \"result\": \"%s\"", pass ? "PASS" : "MISS");
    }
    fputc('}', json);
}

void report_error(const char *label, const char *msg)
{
    n_errors++;
    printf("%-*s  ERROR: %s\n", LABEL_WIDTH, label, msg);
    fflush(stdout);
    if (!json_begin_row("label", label))
        return;
    fputs(", \"error\": ", json);
    json_string(msg);
    fputc('}', json);
}

int report_close(void)
{
    printf("\nGoals\n");
    if (json) {
        json_end_section();
        fputs("\n  ],\n  \"goals\": [", json);
    }
    for (int g = 1; g < GOAL_COUNT; g++) {
        const char *res = !goal_rows[g] ? "NOT MEASURED" : goal_missed[g] ? "MISS" : "PASS";
        printf("  %-12s %s", res, goal_text[g]);
        if (goal_missed[g])
            printf(" (%d of %d rows missed)", goal_missed[g], goal_rows[g]);
        putchar('\n');
        if (json) {
            fputs(g > 1 ? ",\n    {\"goal\": " : "\n    {\"goal\": ", json);
            json_string(goal_text[g]);
            fprintf(json, ", \"result\": \"%s\", \"rows\": %d, \"missed\": %d}", res, goal_rows[g],
                    goal_missed[g]);
        }
    }
    if (n_errors)
        printf("%d row(s) failed: see ERROR above\n", n_errors);
    if (json) {
        fprintf(json, "\n  ],\n  \"errors\": %d\n}\n", n_errors);
        if (fclose(json) != 0) {
            perror("results file");
            n_errors++;
        }
        json = NULL;
    }
    return n_errors ? 1 : 0;
}

const char *fmt_bytes(size_t bytes, char buf[32])
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, 32, "%zu %s", bytes, unit[u]);
    return buf;
}

#define MAX_REFS 256
static struct {
    char key[24];
    double size, value;
} refs[MAX_REFS];
static int n_refs;

const char *bench_python(void)
{
    const char *python = getenv("BLOB_BENCH_PYTHON");
    return python && *python ? python : "python3";
}

void torch_load_launched(const char *launcher, int nproc, const char *script, const char *args)
{
    char py[512];
    snprintf(py, sizeof py, "%s --nproc %d %s", launcher, nproc, bench_python());
    setenv("BLOB_BENCH_PYTHON", py, 1);
    if (!getenv("BLOB_BENCH_TORCH"))
        setenv("BLOB_BENCH_TORCH", script, 1);
    torch_load(args);
}

void torch_load(const char *args)
{
    const char *python = bench_python();
    const char *script = getenv("BLOB_BENCH_TORCH");
    if (!script)
        script = "bench/torch_ref.py";
    if (!*script) {
        report_meta("torch", "not run (BLOB_BENCH_TORCH is empty)");
        return;
    }
    if (access(script, R_OK) != 0) {
        report_meta("torch", "not run (%s not found)", script);
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 120 %s %s %s 2>&1", python, script, args);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        report_meta("torch", "not run (popen failed)");
        return;
    }
    char line[512], last[256] = "no output", first_error[256] = "", info[224] = "";
    int errors = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        char key[24];
        double size, value;
        if (sscanf(line, "ref %23s %lf %lf", key, &size, &value) == 3) {
            if (n_refs < MAX_REFS) {
                snprintf(refs[n_refs].key, sizeof refs[n_refs].key, "%s", key);
                refs[n_refs].size = size;
                refs[n_refs++].value = value;
            }
        } else if (!strncmp(line, "info ", 5)) {
            snprintf(info, sizeof info, "%.200s", line + 5);
        } else if (*line) {
            if (!strncmp(line, "error ", 6) && !errors++)
                snprintf(first_error, sizeof first_error, "%.200s", line + 6);
            snprintf(last, sizeof last, "%.200s", line);
        }
    }
    int status = pclose(p);
    if (!n_refs)
        report_meta("torch", "not available: %s", last);
    else if (errors)
        report_meta("torch", "%s; %d figure(s) failed, the first: %s", info, errors, first_error);
    else
        report_meta("torch", "%s%s", info, status ? " (the script failed part-way)" : "");
}

double torch_ref(const char *key, double size)
{
    for (int i = 0; i < n_refs; i++)
        if (refs[i].size == size && !strcmp(refs[i].key, key))
            return refs[i].value;
    return NAN;
}
