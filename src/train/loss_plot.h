/* loss_plot.h: one figure of training runs (`qlora-train plot`, and output.dir/loss.png after each run):
 * the training loss (solid) and eval loss (dashed, dots) against step on the upper panel, the learning rate
 * on the lower one, one colour per run (the legend names the run directories). Drawn with cairo: PNG or SVG
 * by the output file's extension. A build without cairo has the functions, which then say so. */
#ifndef QLT_LOSS_PLOT_H
#define QLT_LOSS_PLOT_H

/* 1 when this build can draw (cairo was found at build time). */
int qlt_loss_plot_available(void);
/* Draws the runs of run_dirs[0..n) (each a run directory or a metrics.jsonl) into out_path (.png or .svg). */
int qlt_loss_plot(const char *const *run_dirs, int n, const char *out_path);

#endif
