//go:build linux && (ppc64 || ppc64le)

package shmem

const sysMemfdCreate = 360
