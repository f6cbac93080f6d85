//go:build linux && (ppc64 || ppc64le)

package shm

const sysMemfdCreate = 360
