package reduce

// SetSIMD switches the assembly loops on (where the CPU has them) or off,
// and returns a function that restores the previous setting. Tests call it
// only while no reduction runs.
func SetSIMD(on bool) (restore func()) {
	a, f := useAVX2, useF16C
	useAVX2, useF16C = on && haveAVX2, on && haveF16C
	return func() { useAVX2, useF16C = a, f }
}

// HaveSIMD reports whether this machine and build have the assembly loops.
func HaveSIMD() bool { return haveAVX2 }
