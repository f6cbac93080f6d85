//go:build linux && (mips || mipsle)

package shm

const sysMemfdCreate = 4354
