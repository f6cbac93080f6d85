package tsc

// haveTSC: the processor has a time-stamp counter this package can read.
const haveTSC = true

// rdtsc reads the time-stamp counter (tsc_amd64.s). It is not ordered
// with the loads and stores around it: a flight-recorder timestamp does
// not need that, and LFENCE or RDTSCP would cost as much as the read.
func rdtsc() uint64
