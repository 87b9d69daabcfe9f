package decode

// SplitAlways makes d split every chunk between two cores, however small,
// if GOMAXPROCS is 2 or more: the tests run the split on small models and
// on a machine of one core.
func SplitAlways(d *Decoder) { d.net.setCores(2, 0) }
