// Package plot draws what people would rather see than read as PNG files:
// the loss and held-out accuracy of a training run (Curves) and a model's
// attention weights as heatmaps, one per layer and head (Attention), line
// panels, scaling plots and runs compared. It is internal, reached by the
// command line (cmd/qkv: curves.png through train.Options.Curves, explain's
// figures, inspect's heatmaps) and tools/nanogpt/compare only, so that the
// library's packages (train, infer, optim) do not pull in the plotting
// libraries.
package plot
