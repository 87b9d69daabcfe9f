package optim

import (
	"math"
	"strings"
	"testing"
)

func TestScheduleValues(t *testing.T) {
	// Peak 1, Min 0.1, 4 warmup steps, cosine over steps 4..14.
	s := Schedule{Peak: 1, Min: 0.1, Warmup: 4, Total: 14}
	cos := func(p float64) float64 { return 0.1 + 0.9*0.5*(1+math.Cos(math.Pi*p)) }
	cases := []struct {
		step int
		want float64
	}{
		{-3, 0.25}, // counts as step 0
		{0, 0.25},
		{1, 0.5},
		{2, 0.75},
		{3, 1}, // end of warmup
		{4, 1}, // start of the cosine
		{5, cos(0.1)},
		{9, 0.55}, // half way: (Peak+Min)/2
		{13, cos(0.9)},
		{14, 0.1},
		{15, 0.1},
		{1000, 0.1},
	}
	for _, tc := range cases {
		if got := s.LR(tc.step); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("LR(%d) = %.17g, want %.17g", tc.step, got, tc.want)
		}
	}
}

func TestScheduleShape(t *testing.T) {
	cases := []struct {
		name string
		s    Schedule
	}{
		{"default-like", Schedule{Peak: 3e-3, Min: 3e-4, Warmup: 50, Total: 2000}},
		{"no warmup", Schedule{Peak: 1e-3, Min: 0, Warmup: 0, Total: 100}},
		{"warmup is everything", Schedule{Peak: 1e-3, Min: 1e-5, Warmup: 10, Total: 10}},
		{"constant", Schedule{Peak: 1e-3, Min: 1e-3, Warmup: 0, Total: 7}},
		{"one step", Schedule{Peak: 0.5, Min: 0.1, Warmup: 0, Total: 1}},
		{"odd sizes", Schedule{Peak: 0.7, Min: 0.01, Warmup: 3, Total: 37}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			for step := 0; step < s.Warmup; step++ {
				lr := s.LR(step)
				if !(lr > 0 && lr <= s.Peak) {
					t.Fatalf("warmup LR(%d) = %v outside (0, %v]", step, lr, s.Peak)
				}
				if step > 0 && !(lr > s.LR(step-1)) {
					t.Fatalf("warmup not increasing: LR(%d) = %v, LR(%d) = %v", step-1, s.LR(step-1), step, lr)
				}
			}
			if s.Warmup > 0 && s.LR(s.Warmup-1) != s.Peak {
				t.Errorf("LR at the end of warmup = %v, want the peak %v", s.LR(s.Warmup-1), s.Peak)
			}
			if s.Warmup < s.Total && s.LR(s.Warmup) != s.Peak {
				t.Errorf("LR at the start of the cosine = %v, want the peak %v", s.LR(s.Warmup), s.Peak)
			}
			for step := s.Warmup; step <= s.Total+5; step++ {
				lr := s.LR(step)
				if !(lr >= s.Min && lr <= s.Peak) {
					t.Fatalf("LR(%d) = %v outside [%v, %v]", step, lr, s.Min, s.Peak)
				}
				if step > s.Warmup && lr > s.LR(step-1) {
					t.Fatalf("decay not monotone: LR(%d) = %v > LR(%d) = %v", step, lr, step-1, s.LR(step-1))
				}
			}
			if s.LR(s.Total) != s.Min || s.LR(s.Total+1) != s.Min {
				t.Errorf("LR(Total) = %v, LR(Total+1) = %v, want Min %v", s.LR(s.Total), s.LR(s.Total+1), s.Min)
			}
		})
	}
}

func TestScheduleValidate(t *testing.T) {
	cases := []struct {
		name string
		s    Schedule
		want string // "" when valid
	}{
		{"valid", Schedule{Peak: 1e-3, Min: 1e-4, Warmup: 10, Total: 100}, ""},
		{"zero min, no warmup", Schedule{Peak: 1e-3, Total: 1}, ""},
		{"zero peak", Schedule{Total: 10}, "peak learning rate 0"},
		{"negative peak", Schedule{Peak: -1, Total: 10}, "peak learning rate -1"},
		{"NaN peak", Schedule{Peak: math.NaN(), Total: 10}, "peak learning rate NaN"},
		{"infinite peak", Schedule{Peak: math.Inf(1), Total: 10}, "peak learning rate +Inf"},
		{"min above peak", Schedule{Peak: 1e-3, Min: 1e-2, Total: 10}, "min learning rate 0.01"},
		{"negative min", Schedule{Peak: 1e-3, Min: -1e-4, Total: 10}, "min learning rate -0.0001"},
		{"NaN min", Schedule{Peak: 1e-3, Min: math.NaN(), Total: 10}, "min learning rate NaN"},
		{"zero total", Schedule{Peak: 1e-3}, "total steps 0"},
		{"negative warmup", Schedule{Peak: 1e-3, Warmup: -1, Total: 10}, "warmup -1"},
		{"warmup beyond total", Schedule{Peak: 1e-3, Warmup: 11, Total: 10}, "warmup 11"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "optim: schedule:") {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
