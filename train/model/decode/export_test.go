package decode

// SplitAlways makes d split every chunk between two cores, however small,
// if GOMAXPROCS is 2 or more, and without the back-off: the tests run the
// split on small models, on a machine of one core, and on a busy one.
func SplitAlways(d *Decoder) { d.net.setCores(2, 0, false) }
