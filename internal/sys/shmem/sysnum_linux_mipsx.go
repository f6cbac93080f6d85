//go:build linux && (mips || mipsle)

package shmem

import "syscall"

const sysMemfdCreate = 4354
const sysProcessVMReadv = syscall.SYS_PROCESS_VM_READV
