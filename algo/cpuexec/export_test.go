package cpuexec

// SetWorkers fixes the number of workers per rank for executors joined
// afterwards (0: by the machine's cores); it returns the old value.
func SetWorkers(n int) int { return int(workersOverride.Swap(int32(n))) }

// Synced and Aliases expose what Join decided, for tests.
func (x *Executor) Synced() bool            { return x.synced }
func (x *Executor) Aliases() (in, out bool) { return x.aliasIn, x.aliasOut }

// SetDirect enables (the default) or disables direct use of the callers'
// tensors between goroutine ranks, for executors joined afterwards.
func SetDirect(on bool) { noDirect.Store(!on) }

// InPrologue reports whether calls check descriptors in the plan's
// prologues instead of at a start barrier.
func (x *Executor) InPrologue() bool { return x.inPrologue }

// SetSeq sets the calls this executor has made (its next call is seq+1
// and has that call's packet flag), so tests reach the flag's cycle.
func (x *Executor) SetSeq(seq uint64) { x.seq = seq }

// SetSpares fixes the spare goroutines per rank for executors joined
// afterwards (0: by the machine's cores, negative: none); it returns the
// old value.
func SetSpares(n int) int { return int(sparesOverride.Swap(int32(n))) }

// Spares is how many spare goroutines the executor runs.
func (x *Executor) Spares() int {
	if x.sp == nil {
		return 0
	}
	return x.sp.n
}

// SpareMin is the smallest op the spare goroutines split.
const SpareMin = spareMin
