package shm

import (
	"os"
	"strconv"
)

func init() {
	if v, err := strconv.Atoi(os.Getenv("FP")); err == nil {
		fastPolls = v
	}
}

func reportLost(t interface{ Logf(string, ...any) }) {
	t.Logf("sleeps=%d lost wakes=%d", sleeps.Load(), lostWakes.Load())
}

func init() {
	if v, err := strconv.Atoi(os.Getenv("YM")); err == nil {
		yieldMode = v
	}
}
