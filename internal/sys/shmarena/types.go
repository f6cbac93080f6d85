package shmarena

// Config sizes an arena; zero values mean the defaults.
type Config struct {
	// Capacity is the virtual size of the arena (0: the host's physical
	// memory). It costs no memory: pages are backed block by block.
	Capacity int64
	// Name is the memfd's name (shown in /proc/PID/fd and maps).
	Name string
}

// Identity is what a peer needs to map an arena.
type Identity struct {
	PID   int
	FD    int
	Size  int64
	Token uint64
}

// Stats are an arena's counters.
type Stats struct {
	Capacity int64 `json:"capacity"`
	InUse    int64 `json:"in_use"`   // bytes of live blocks
	Reserved int64 `json:"reserved"` // bytes backed by fallocate (the arena's memory)
	Peak     int64 `json:"peak"`     // most bytes in use at once
	Allocs   int64 `json:"allocs"`
	Frees    int64 `json:"frees"`
	// Stuck counts blocks that could not be given back because their
	// address could not be remapped private (they stay in use).
	Stuck int64 `json:"stuck"`
	// Trims counts the times free pages above the highest live block
	// were given back to the kernel (hole punched).
	Trims int64 `json:"trims"`
}
