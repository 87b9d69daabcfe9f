// Package plot draws what people would rather see than read as PNG files:
// the loss and held-out accuracy of a training run (Curves) and a model's
// attention weights as heatmaps, one per layer and head (Attention). It is a
// package of its own so that inference and training code do not pull in
// the plotting libraries.
package plot
