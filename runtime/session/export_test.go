package session

import "testing"

// NoBroadcastLog makes the process sessions started until t ends send
// their commands through each worker's ring instead of the broadcast
// log.
func NoBroadcastLog(t testing.TB) {
	testNoLog.Store(true)
	t.Cleanup(func() { testNoLog.Store(false) })
}
