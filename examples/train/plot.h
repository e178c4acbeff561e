/*
 * plot.h - training curves as a self-contained SVG line chart.
 *
 *   plot_curves_svg("curve.svg", "MLP on Fashion-MNIST", epochs, loss, train_acc, test_acc);
 */
#ifndef TRAIN_PLOT_H
#define TRAIN_PLOT_H

/* One point per epoch: the mean training loss on the left axis, the training and test
 * accuracy (fractions, drawn as %) on the right, with axes, labels and a legend.
 * Returns 0, or -1 with errno set when the file cannot be written. */
int plot_curves_svg(const char *path, const char *title, int epochs, const double *loss,
                    const double *train_acc, const double *test_acc);

#endif
