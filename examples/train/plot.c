#include "plot.h"

#include <math.h>
#include <stdio.h>

/* Canvas and plot area, in SVG user units. */
enum { WIDTH = 720, HEIGHT = 450, LEFT = 80, RIGHT = 640, TOP = 50, BOTTOM = 360 };

static const char *const COLOR_LOSS = "#d62728", *const COLOR_TRAIN = "#1f77b4",
                         *const COLOR_TEST = "#2ca02c";

typedef struct {
    double lo, hi, step;
} axis;

/* Round [lo, hi] out to multiples of a 1-2-5 step giving about five intervals. */
static axis nice_axis(double lo, double hi)
{
    double raw = (hi - lo) / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
    axis a = {floor(lo / step) * step, ceil(hi / step) * step, step};
    return a;
}

static int ticks(axis a) { return (int)lround((a.hi - a.lo) / a.step); }

static double px(int epoch, int epochs) { return LEFT + (epoch - 0.5) / epochs * (RIGHT - LEFT); }

static double py(double v, axis a) { return BOTTOM - (v - a.lo) / (a.hi - a.lo) * (BOTTOM - TOP); }

static void text(FILE *f, double x, double y, const char *anchor, const char *color, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\">", x, y, anchor, color);
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        default: fputc(*s, f);
        }
    fputs("</text>\n", f);
}

/* A polyline with a dot at every point; values scaled by `scale` first. */
static void series(FILE *f, int epochs, const double *v, double scale, axis a, const char *color,
                   const char *dash)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color, dash);
    for (int e = 0; e < epochs; e++)
        fprintf(f, "%s%.1f,%.1f", e ? " " : "", px(e + 1, epochs), py(v[e] * scale, a));
    fputs("\"/>\n", f);
    for (int e = 0; e < epochs; e++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(e + 1, epochs),
                py(v[e] * scale, a), color);
}

static void legend_entry(FILE *f, double x, const char *color, const char *dash, const char *label)
{
    double y = HEIGHT - 22;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"%s/>\n",
            x, y - 4, x + 24, y - 4, color, dash);
    text(f, x + 30, y, "start", "#333", label);
}

/* The canvas and the title. */
static void head(FILE *f, const char *title)
{
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    fputs("<g font-size=\"16\">\n", f);
    text(f, WIDTH / 2.0, 28, "middle", "#000", title);
    fputs("</g>\n", f);
}

/* The grid with the left (loss) ticks, and the right (accuracy) ticks. */
static void y_ticks(FILE *f, axis la, axis aa)
{
    char label[32];
    for (int i = 0; i <= ticks(la); i++) {
        double v = la.lo + i * la.step;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", LEFT,
                py(v, la), RIGHT, py(v, la));
        snprintf(label, sizeof label, "%g", v);
        text(f, LEFT - 8, py(v, la) + 4, "end", "#333", label);
    }
    for (int i = 0; i <= ticks(aa); i++) {
        double v = aa.lo + i * aa.step;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n", RIGHT,
                py(v, aa), RIGHT + 5, py(v, aa));
        snprintf(label, sizeof label, "%g%%", v);
        text(f, RIGHT + 8, py(v, aa) + 4, "start", "#333", label);
    }
}

/* The x ticks: every epoch, or about ten of them. */
static void x_ticks(FILE *f, int epochs)
{
    char label[32];
    int every = (epochs + 9) / 10;
    for (int e = 1; e <= epochs; e++) {
        if (e % every && e != 1)
            continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n",
                px(e, epochs), BOTTOM, px(e, epochs), BOTTOM + 5);
        snprintf(label, sizeof label, "%d", e);
        text(f, px(e, epochs), BOTTOM + 20, "middle", "#333", label);
    }
}

/* The plot area's frame and the axes' titles. */
static void frame(FILE *f)
{
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#333\"/>\n",
            LEFT, TOP, RIGHT - LEFT, BOTTOM - TOP);
    text(f, (LEFT + RIGHT) / 2.0, BOTTOM + 42, "middle", "#333", "epoch");
    fprintf(f, "<g transform=\"translate(%d %d) rotate(-90)\">\n", LEFT - 52, (TOP + BOTTOM) / 2);
    text(f, 0, 0, "middle", COLOR_LOSS, "training loss");
    fprintf(f, "</g>\n<g transform=\"translate(%d %d) rotate(90)\">\n", RIGHT + 60,
            (TOP + BOTTOM) / 2);
    text(f, 0, 0, "middle", "#333", "accuracy");
    fputs("</g>\n", f);
}

int plot_curves_svg(const char *path, const char *title, int epochs, const double *loss,
                    const double *train_acc, const double *test_acc)
{
    double max_loss = 0, lo_acc = 100, hi_acc = 0;
    for (int e = 0; e < epochs; e++) {
        max_loss = fmax(max_loss, loss[e]);
        lo_acc = fmin(lo_acc, 100 * fmin(train_acc[e], test_acc[e]));
        hi_acc = fmax(hi_acc, 100 * fmax(train_acc[e], test_acc[e]));
    }
    axis la = nice_axis(0, max_loss > 0 ? max_loss : 1);
    axis aa = nice_axis(fmin(lo_acc, hi_acc - 5), hi_acc);

    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    head(f, title);
    y_ticks(f, la, aa);
    x_ticks(f, epochs);
    frame(f);

    const char *solid = "", *dashed = " stroke-dasharray=\"6 4\"";
    series(f, epochs, loss, 1, la, COLOR_LOSS, solid);
    series(f, epochs, train_acc, 100, aa, COLOR_TRAIN, solid);
    series(f, epochs, test_acc, 100, aa, COLOR_TEST, dashed);
    legend_entry(f, LEFT + 40, COLOR_LOSS, solid, "training loss (left)");
    legend_entry(f, LEFT + 230, COLOR_TRAIN, solid, "training accuracy");
    legend_entry(f, LEFT + 400, COLOR_TEST, dashed, "test accuracy");
    fputs("</svg>\n", f);

    int bad = ferror(f);
    return fclose(f) || bad ? -1 : 0;
}
