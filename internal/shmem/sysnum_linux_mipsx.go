//go:build linux && (mips || mipsle)

package shmem

const sysMemfdCreate = 4354
