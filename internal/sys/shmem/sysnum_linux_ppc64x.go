//go:build linux && (ppc64 || ppc64le)

package shmem

import "syscall"

const sysMemfdCreate = 360
const sysProcessVMReadv = syscall.SYS_PROCESS_VM_READV
