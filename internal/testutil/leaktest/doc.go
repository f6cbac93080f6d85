// Package leaktest checks that a test leaves no goroutines behind: Check
// snapshots the running goroutines and, at cleanup, fails the test with the
// stacks of any that the test started and did not stop.
package leaktest
