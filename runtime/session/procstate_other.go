//go:build !linux

package session

func procState(pid int) string { return "" }
