package session

import (
	"fmt"
	"os"
	"strings"
)

// procState describes a process's scheduler state from /proc: whether a
// worker that does not answer is stopped (SIGSTOP, a debugger), running,
// asleep or gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "no such process"
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	switch s[i+2] {
	case 'R':
		return "running"
	case 'S':
		return "sleeping"
	case 'D':
		return "in uninterruptible wait (disk or device)"
	case 'T':
		return "stopped (SIGSTOP or job control)"
	case 't':
		return "stopped by a debugger"
	case 'Z':
		return "exited (zombie)"
	}
	return "state " + string(s[i+2])
}
