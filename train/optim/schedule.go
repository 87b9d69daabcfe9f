package optim

import (
	"fmt"
	"math"
)

// Schedule is a learning-rate schedule: linear warmup to Peak over the first
// Warmup steps, then cosine decay from Peak to Min until step Total, and Min
// after that (the GPT-2/minGPT recipe). Steps count from 0.
type Schedule struct {
	// Peak is the learning rate at the end of warmup.
	Peak float64
	// Min is the learning rate the cosine reaches at step Total and keeps.
	Min float64
	// Warmup is the number of warmup steps; 0 starts the cosine at once.
	Warmup int
	// Total is the step at which the cosine reaches Min, usually the number
	// of training steps. Run sets it to Config.Steps and gives the update of
	// 0-based step t the rate LR(t), so its last update (t = Total-1) runs
	// just above Min, and a run that stops early at its target exact match
	// stops part way down the same curve.
	Total int
}

// Validate reports whether s is a usable schedule: 0 <= Min <= Peak, both
// finite, Peak > 0, and 0 <= Warmup <= Total with Total > 0.
func (s Schedule) Validate() error {
	if !(s.Peak > 0) || math.IsInf(s.Peak, 1) {
		return fmt.Errorf("optim: schedule: peak learning rate %v must be positive and finite", s.Peak)
	}
	if !(s.Min >= 0 && s.Min <= s.Peak) {
		return fmt.Errorf("optim: schedule: min learning rate %v must be in [0, peak %v]", s.Min, s.Peak)
	}
	if s.Total <= 0 {
		return fmt.Errorf("optim: schedule: total steps %d must be positive", s.Total)
	}
	if s.Warmup < 0 || s.Warmup > s.Total {
		return fmt.Errorf("optim: schedule: warmup %d must be in [0, total %d]", s.Warmup, s.Total)
	}
	return nil
}

// LR returns the learning rate of step (0-based):
//
//	step < Warmup:          Peak·(step+1)/Warmup   (never 0, Peak at step Warmup-1)
//	Warmup <= step <= Total: Min + (Peak-Min)·(1+cos(π·(step-Warmup)/(Total-Warmup)))/2
//	step > Total:           Min
//
// so step Warmup is Peak again and step Total is Min. Warmup values may lie
// below Min; after warmup LR stays in [Min, Peak]. A negative step counts as
// step 0. The schedule should pass Validate.
func (s Schedule) LR(step int) float64 {
	step = max(step, 0)
	switch {
	case step < s.Warmup:
		return s.Peak * (float64(step+1) / float64(s.Warmup)) // exactly Peak at step Warmup-1
	case step >= s.Total:
		return s.Min
	}
	progress := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	lr := s.Min + (s.Peak-s.Min)*0.5*(1+math.Cos(math.Pi*progress))
	return min(max(lr, s.Min), s.Peak) // rounding must not leave [Min, Peak]
}
