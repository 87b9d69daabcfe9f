//go:build linux

package decode_test

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/model/decode"
)

// BenchmarkFeed times a step of nanoGPT's preset model (float32, the
// positions 0 … context-1 in turn) for 1 and 8 rows, at GOMAXPROCS 1 (one
// core) and 2 (the step split between two, where the machine has them):
// ns/op is per step, tokens/s counts every row's token. With -count, the
// four alternate, so that their ratios come from the same minutes of a
// shared machine.
func BenchmarkFeed(b *testing.B) {
	for _, rows := range []int{1, 8} {
		for _, procs := range []int{1, 2} {
			b.Run(fmt.Sprintf("rows=%d/procs=%d", rows, procs), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				cfg, _ := config.Preset(config.PresetNanoGPTCPU)
				cfg.Model.Vocab, cfg.Model.MaxLen = 106, 65
				m, err := model.Build(cfg, 1, 65, model.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				fast, err := decode.New(cfg, rows, m.Params)
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]int, rows)
				cpu0 := cpuTime()
				for b.Loop() {
					if fast.Len(0) >= fast.Context() {
						fast.Reset()
					}
					if err := fast.Feed(ids); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
				// The process's CPU time per step: on a loaded machine, what
				// the step costs when it runs, whatever else waits for the
				// core; split, both cores' time.
				b.ReportMetric((cpuTime()-cpu0)*1e6/float64(b.N), "cpu-µs/step")
			})
		}
	}
}

// cpuTime is the process's user and system time, in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
